/**
 * `POST /v1/messages`, the Anthropic Messages API as `@anthropic-ai/sdk` sends it: `system`,
 * user and assistant turns of `text`, `tool_use` and `tool_result` blocks, custom `tools` with
 * `input_schema`, `tool_choice` (`auto`, `any`, `tool`, `none`, `disable_parallel_tool_use`),
 * `max_tokens`, `stop_sequences`, `temperature`, `top_p`, `top_k`, and `stream: true` with the
 * documented events; and `POST /v1/messages/count_tokens`, the prompt's length in the policy's
 * tokens. The request becomes the same {@link CompletionRequest} as a chat completion,
 * so it is rendered, generated and recorded by the one {@link complete}; only the wire shapes
 * differ. Errors are answered in Anthropic's shape by the server (`GatewayError.toAnthropicBody`).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { templateToolCall, type CompletionRequest, type TemplateMessage } from './chat-request.ts';
import type { ChoiceStream, CompletionChoice, StreamSink, ToolCallOut } from './choice-stream.ts';
import type { CompletionResult } from './completion.ts';
import type { ToolSpec } from './tool-choice.ts';
import type { GatewayError } from './errors.ts';
import { badField } from './errors.ts';
import { sendJson, sendSse, startSse } from './sse.ts';
import type { ToolChoice } from './tool-choice.ts';
import * as v from './validate.ts';

/** A parsed Messages body: what to generate, and whether to stream it. */
export interface MessagesRequest {
  req: CompletionRequest;
  stream: boolean;
}

/**
 * Parses a Messages body, or throws a 400 naming the first bad field. `countTokens`: a
 * `count_tokens` body, which has no `max_tokens`.
 */
export function parseMessagesRequest(body: unknown, countTokens = false): MessagesRequest {
  const b = v.object(body, 'body');
  const model = v.string(b['model'], 'model');
  const maxTokens = countTokens ? 1 : v.integer(b['max_tokens'], 'max_tokens', 1);
  const raw = v.array(b['messages'], 'messages');
  if (raw.length === 0) throw badField('messages', 'must hold at least one message');
  const system = v.optional(b['system'], (x) => textBlocks(x, 'system'));
  const messages = [
    ...(system !== undefined ? [{ role: 'system' as const, content: system }] : []),
    ...turns(raw),
  ];
  const tools = v.optional(b['tools'], parseTools);
  const choice = v.optional(b['tool_choice'], (x) => v.object(x, 'tool_choice'));
  const thinking = v.optional(b['thinking'], (x) => v.object(x, 'thinking'));
  if (thinking && thinking['type'] !== 'disabled') {
    throw badField(
      'thinking',
      'extended thinking is not supported: the policy thinks as its template lets it',
    );
  }
  const temperature = v.optional(b['temperature'], (x) => v.number(x, 'temperature', 0, 1));
  const topP = v.optional(b['top_p'], (x) => v.number(x, 'top_p', 0, 1));
  const topK = v.optional(b['top_k'], (x) => v.integer(x, 'top_k', 0));
  const stop = (v.optional(b['stop_sequences'], (x) => v.array(x, 'stop_sequences')) ?? [])
    .map((s, i) => v.string(s, `stop_sequences[${i}]`))
    .filter((s) => s !== '');
  return {
    req: {
      model,
      messages,
      ...(tools?.length ? { tools } : {}),
      toolChoice: toolChoiceOf(choice, tools),
      parallelToolCalls:
        v.optional(choice?.['disable_parallel_tool_use'], (x) =>
          v.boolean(x, 'tool_choice.disable_parallel_tool_use'),
        ) !== true,
      sampling: {
        ...(temperature !== undefined ? { temperature } : {}),
        ...(topP !== undefined ? { topP } : {}),
        ...(topK !== undefined ? { topK } : {}),
        maxTokens,
        stop,
        n: 1,
        logprobs: false,
        topLogprobs: 0,
      },
    },
    stream: v.optional(b['stream'], (x) => v.boolean(x, 'stream')) ?? false,
  };
}

/** A string, or the concatenated text of `text` blocks. */
function textBlocks(raw: unknown, param: string): string {
  if (typeof raw === 'string') return raw;
  return v
    .array(raw, param)
    .map((block, i) => {
      const o = v.object(block, `${param}[${i}]`);
      if (o['type'] !== 'text')
        throw badField(
          `${param}[${i}].type`,
          `only text blocks are supported here, got '${String(o['type'])}'`,
        );
      return v.string(o['text'], `${param}[${i}].text`);
    })
    .join('');
}

/**
 * The turns as template messages: an assistant turn's `text` blocks are its content and its
 * `tool_use` blocks its calls; a user turn's `tool_result` blocks become `tool` messages (named
 * after the call they answer) and its text a user message, in the order given. Thinking blocks
 * are skipped, as Responses `reasoning` items are.
 */
function turns(raw: unknown[]): TemplateMessage[] {
  const out: TemplateMessage[] = [];
  const names = new Map<string, string>();
  raw.forEach((m, i) => {
    const p = `messages[${i}]`;
    const o = v.object(m, p);
    const role = v.string(o['role'], `${p}.role`);
    if (role !== 'user' && role !== 'assistant')
      throw badField(`${p}.role`, `'${role}' is not one of user, assistant`);
    const content = o['content'];
    if (typeof content === 'string') {
      out.push({ role, content });
      return;
    }
    const blocks = v.array(content, `${p}.content`);
    let text: string | undefined;
    const calls: TemplateMessage['tool_calls'] = [];
    const flushText = (): void => {
      if (text !== undefined && role === 'user') out.push({ role, content: text });
      if (role === 'user') text = undefined;
    };
    blocks.forEach((block, j) => {
      const q = `${p}.content[${j}]`;
      const bo = v.object(block, q);
      const type = bo['type'];
      if (type === 'text') {
        text = (text ?? '') + v.string(bo['text'], `${q}.text`);
      } else if (type === 'tool_use' && role === 'assistant') {
        const id = v.string(bo['id'], `${q}.id`);
        const name = v.string(bo['name'], `${q}.name`);
        const input = v.object(bo['input'], `${q}.input`);
        calls.push(templateToolCall(id, name, JSON.stringify(input), `${q}.input`));
        names.set(id, name);
      } else if (type === 'tool_result' && role === 'user') {
        flushText();
        const id = v.string(bo['tool_use_id'], `${q}.tool_use_id`);
        const result = bo['content'] === undefined ? '' : textBlocks(bo['content'], `${q}.content`);
        const name = names.get(id);
        out.push({ role: 'tool', content: result, tool_call_id: id, ...(name ? { name } : {}) });
      } else if (type === 'thinking' || type === 'redacted_thinking') {
        // Not part of the policy's prompt, as reasoning summaries are not.
      } else {
        const allowed = role === 'user' ? 'text, tool_result' : 'text, tool_use, thinking';
        throw badField(
          `${q}.type`,
          `'${String(type)}' is not supported in a ${role} turn (${allowed})`,
        );
      }
    });
    if (role === 'user') flushText();
    else out.push({ role, content: text ?? '', ...(calls.length ? { tool_calls: calls } : {}) });
  });
  return out;
}

function parseTools(raw: unknown): ToolSpec[] {
  return v.array(raw, 'tools').map((t, i) => {
    const p = `tools[${i}]`;
    const o = v.object(t, p);
    if (o['type'] !== undefined && o['type'] !== null && o['type'] !== 'custom')
      throw badField(`${p}.type`, `only custom tools are supported, got '${String(o['type'])}'`);
    const name = v.string(o['name'], `${p}.name`);
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(name))
      throw badField(`${p}.name`, 'must be 1-64 letters, digits, _ or -');
    const description = v.optional(o['description'], (x) => v.string(x, `${p}.description`));
    const parameters = v.object(o['input_schema'], `${p}.input_schema`);
    return {
      type: 'function',
      function: { name, ...(description !== undefined ? { description } : {}), parameters },
    };
  });
}

/** Anthropic's `tool_choice` as the gateway's: `any` is `required`, `tool` a named function. */
function toolChoiceOf(c: v.Json | undefined, tools: ToolSpec[] | undefined): ToolChoice {
  const type = c === undefined ? 'auto' : v.string(c['type'], 'tool_choice.type');
  switch (type) {
    case 'auto':
      return 'auto';
    case 'none':
      return 'none';
    case 'any':
      if (!tools?.length) throw badField('tool_choice', `'any' needs at least one tool`);
      return 'required';
    case 'tool': {
      const name = v.string(c!['name'], 'tool_choice.name');
      if (!tools?.some((t) => t.function.name === name))
        throw badField('tool_choice.name', `no tool named '${name}' in tools`);
      return { name };
    }
    default:
      throw badField('tool_choice.type', `'${type}' is not one of auto, any, tool, none`);
  }
}

/** Anthropic's `stop_reason` of a choice. */
function stopReason(c: CompletionChoice): 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' {
  if (c.finishReason === 'tool_calls') return 'tool_use';
  if (c.finishReason === 'length') return 'max_tokens';
  return c.stopSequence !== null ? 'stop_sequence' : 'end_turn';
}

/** A tool_use id in Anthropic's spelling, from the gateway's call id. */
function toolUseId(call: ToolCallOut): string {
  return `toolu_${call.id.replace(/^call_/, '')}`;
}

function toolUseBlock(call: ToolCallOut) {
  return {
    type: 'tool_use',
    id: toolUseId(call),
    name: call.name,
    input: JSON.parse(call.arguments) as unknown,
  };
}

function usage(r: Pick<CompletionResult, 'promptTokens' | 'completionTokens'>) {
  return {
    input_tokens: r.promptTokens,
    output_tokens: r.completionTokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
  };
}

function messageObject(id: string, model: string, r: CompletionResult, content: unknown[]) {
  const c = r.choices[0]!;
  return {
    id,
    type: 'message',
    role: 'assistant',
    model,
    content,
    stop_reason: stopReason(c),
    stop_sequence: c.stopSequence,
    usage: usage(r),
  };
}

/** A fresh `message` id. */
export function messageId(): string {
  return `msg_${randomBytes(12).toString('hex')}`;
}

/** Answers a whole `message` object: a text block (when there is text), then the tool_use blocks. */
export function sendMessage(
  res: ServerResponse,
  model: string,
  r: CompletionResult,
  id = messageId(),
): void {
  const c = r.choices[0]!;
  const content = [
    ...(c.content !== null ? [{ type: 'text', text: c.content }] : []),
    ...c.toolCalls.map(toolUseBlock),
  ];
  sendJson(res, 200, messageObject(id, model, r, content));
}

/**
 * Messages streaming events, sent as the answer is generated: `message_start` at the first, then
 * per content block `content_block_start`, its deltas (`text_delta`, or the call's whole input
 * as one `input_json_delta`) and `content_block_stop`; {@link end} sends `message_delta` (stop
 * reason, usage) and `message_stop`. Text after a tool call opens a new text block.
 */
export class MessagesStream implements StreamSink {
  private started = false;
  private blocks = 0;
  private openText: number | undefined;

  constructor(
    private readonly res: ServerResponse,
    private readonly model: string,
    private readonly id = messageId(),
  ) {}

  text(_choice: ChoiceStream, delta: string): void {
    this.start();
    if (this.openText === undefined) {
      this.openText = this.blocks++;
      this.send('content_block_start', {
        index: this.openText,
        content_block: { type: 'text', text: '' },
      });
    }
    this.send('content_block_delta', {
      index: this.openText,
      delta: { type: 'text_delta', text: delta },
    });
  }

  toolCall(_choice: ChoiceStream, _k: number, call: ToolCallOut): void {
    this.start();
    this.closeText();
    const index = this.blocks++;
    this.send('content_block_start', {
      index,
      content_block: { type: 'tool_use', id: toolUseId(call), name: call.name, input: {} },
    });
    this.send('content_block_delta', {
      index,
      delta: { type: 'input_json_delta', partial_json: call.arguments },
    });
    this.send('content_block_stop', { index });
  }

  done(): void {
    this.closeText();
  }

  /** Sends `message_delta` and `message_stop`, and ends the stream. */
  end(r: CompletionResult): void {
    this.start();
    const c = r.choices[0]!;
    this.send('message_delta', {
      delta: { stop_reason: stopReason(c), stop_sequence: c.stopSequence },
      usage: usage(r),
    });
    this.send('message_stop', {});
    this.res.end();
  }

  /** Ends a started stream with an `error` event, which the SDK raises; false when not started. */
  fail(err: GatewayError): boolean {
    if (!this.started) return false;
    this.send('error', err.toAnthropicBody());
    this.res.end();
    return true;
  }

  private start(): void {
    if (this.started) return;
    this.started = true;
    startSse(this.res);
    this.send('message_start', {
      message: {
        id: this.id,
        type: 'message',
        role: 'assistant',
        model: this.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: usage({ promptTokens: 0, completionTokens: 0 }),
      },
    });
  }

  private closeText(): void {
    if (this.openText === undefined) return;
    this.send('content_block_stop', { index: this.openText });
    this.openText = undefined;
  }

  private send(type: string, data: Record<string, unknown>): void {
    if (this.res.destroyed) return;
    sendSse(this.res, { type, ...data }, type);
  }
}
