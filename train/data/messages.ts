/**
 * A prompt field that is a conversation: a list of chat messages (`[{role, content}]`, the
 * `context_messages` of OpenRLHF's prompt sets) instead of a string. Such a prompt is rendered
 * with the model's chat template by the rollout, as `--apply_chat_template` does in OpenRLHF.
 *
 * @module
 */
import type { ChatMessage } from '../../agents/types.ts';

/** `value` as chat messages when it is a non-empty list of `{role, content}` objects, else undefined. */
export function chatMessages(value: unknown): ChatMessage[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const ok = value.every(
    (m) =>
      typeof m === 'object' &&
      m !== null &&
      typeof (m as ChatMessage).role === 'string' &&
      typeof (m as ChatMessage).content === 'string',
  );
  return ok ? (value as ChatMessage[]) : undefined;
}

/** The text a conversation shows as its prompt (reports, samples): its last user message. */
export function promptText(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--)
    if (messages[i]!.role === 'user') return messages[i]!.content;
  return messages[messages.length - 1]!.content;
}
