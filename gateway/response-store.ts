/**
 * Stored responses of one key (`store: true`, the default), so a Responses request can name
 * `previous_response_id` instead of resending the conversation, as the OpenAI Agents SDK does when
 * the server manages it. Each key has its own store, dropped with the key: an episode continues
 * only its own responses, and one that ended can be continued by no one.
 *
 * @module
 */
import type { TemplateMessage } from './chat-request.ts';

/** How many responses a store keeps before it forgets its oldest. */
const storeCapacity = 1024;

/** The conversations (template messages, no instructions) that stored responses ended. */
export class ResponseStore {
  private readonly byId = new Map<string, TemplateMessage[]>();

  /** The conversation that response `id` ended: its input and its output, as messages. */
  get(id: string): TemplateMessage[] | undefined {
    return this.byId.get(id);
  }

  /** Keeps `conversation` as the one response `id` ended. */
  put(id: string, conversation: TemplateMessage[]): void {
    this.byId.set(id, conversation);
    if (this.byId.size > storeCapacity) this.byId.delete(this.byId.keys().next().value!);
  }
}
