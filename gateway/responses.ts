/**
 * `POST /v1/responses`, as the OpenAI Agents SDK and the Vercel AI SDK use it: `input` as a string
 * or items (messages, `function_call`, `function_call_output`; `reasoning` items are skipped),
 * `instructions`, function `tools`, sampling, `stream: true` with the documented events, and
 * `store` (default true) + `previous_response_id`: a stored response's conversation (its input
 * and output, without its instructions, as OpenAI keeps them) comes before the new input. Stored
 * responses belong to the key (the episode) that made them (`response-store.ts`).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import {
  optionalSampling,
  parallelToolCalls,
  templateToolCall,
  textContent,
  toolSpec,
  type CompletionRequest,
  type TemplateMessage,
} from './chat-request.ts';
import type { ChoiceStream, StreamSink, ToolCallOut } from './choice-stream.ts';
import { complete, type CompletionContext, type CompletionResult } from './completion.ts';
import { badField, GatewayError } from './errors.ts';
import { sendJson, sendSse, startSse } from './sse.ts';
import { parseToolChoice, type ToolSpec } from './tool-choice.ts';
import type { ResponseStore } from './response-store.ts';
import type { TokenSession } from './token-session.ts';
import * as v from './validate.ts';

/** Parses the body, generates one completion and answers it whole or as events. */
export async function handleResponses(
  res: ServerResponse,
  body: unknown,
  ctx: CompletionContext,
  model: string,
  session: TokenSession | undefined,
  signal: AbortSignal,
  stored: ResponseStore,
  retry: boolean,
): Promise<CompletionResult & { responseId?: string }> {
  const b = v.object(body, 'body');
  const previous = v.optional(b['previous_response_id'], (x) =>
    v.string(x, 'previous_response_id'),
  );
  const prior = previous === undefined ? [] : stored.get(previous);
  if (prior === undefined) {
    throw badField(
      'previous_response_id',
      `no stored response '${previous}' in this episode (responses are kept per episode key, when made with store: true)`,
    );
  }
  const meta: ResponseMeta = {
    id: `resp_${randomBytes(12).toString('hex')}`,
    store: v.optional(b['store'], (x) => v.boolean(x, 'store')) ?? true,
    previousResponseId: previous ?? null,
  };
  const instructions = v.optional(b['instructions'], (x) => v.string(x, 'instructions'));
  const input = inputMessages(b['input'], prior);
  const messages = [
    ...(instructions ? [{ role: 'system' as const, content: instructions }] : []),
    ...prior,
    ...input,
  ];
  if (messages.length === 0) throw badField('input', 'must hold at least one message');
  const tools = v.optional(b['tools'], (x) => responseTools(x));
  const maxTokens = v.optional(b['max_output_tokens'], (x) => v.integer(x, 'max_output_tokens', 1));
  const req: CompletionRequest = {
    model,
    messages,
    ...(tools?.length ? { tools } : {}),
    toolChoice: parseToolChoice(b['tool_choice'], tools),
    parallelToolCalls: parallelToolCalls(b),
    sampling: {
      ...optionalSampling(b),
      ...(maxTokens !== undefined ? { maxTokens } : {}),
      stop: [],
      n: 1,
      logprobs: false,
      topLogprobs: 0,
    },
  };
  const stream = v.optional(b['stream'], (x) => v.boolean(x, 'stream')) ?? false;
  const sink = stream ? new ResponsesStream(res, b, meta, model, tools ?? []) : undefined;
  let result: CompletionResult;
  try {
    result = await complete(ctx, req, session, signal, sink, { retry });
  } catch (err) {
    // A stream already under way ends with an error event, which the client raises.
    if (sink?.fail(err)) return { promptTokens: 0, completionTokens: 0, choices: [], engineMs: 0 };
    throw err;
  }
  if (meta.store) stored.put(meta.id, [...prior, ...input, assistantMessage(result)]);
  if (sink) {
    sink.end(result);
    return { ...result, responseId: meta.id };
  }
  sendJson(res, 200, responseObject(b, meta, model, result, tools ?? [], outputItems(result)));
  return { ...result, responseId: meta.id };
}

/** What makes a response itself: its id, whether it is stored, what it continues. */
interface ResponseMeta {
  id: string;
  store: boolean;
  previousResponseId: string | null;
}

/** The answer as the assistant message a later request's conversation holds. */
function assistantMessage(r: CompletionResult): TemplateMessage {
  const c = r.choices[0]!;
  const calls = c.toolCalls.map((t) => templateToolCall(t.id, t.name, t.arguments, 'output'));
  return {
    role: 'assistant',
    content: c.content ?? '',
    ...(calls.length ? { tool_calls: calls } : {}),
  };
}

/** The input items as template messages; `prior` (a stored conversation) names earlier calls. */
function inputMessages(raw: unknown, prior: TemplateMessage[]): TemplateMessage[] {
  if (typeof raw === 'string') return [{ role: 'user', content: raw }];
  const items = v.array(raw, 'input');
  const out: TemplateMessage[] = [];
  const names = new Map<string, string>(
    prior.flatMap((m) => (m.tool_calls ?? []).map((c) => [c.id, c.function.name] as const)),
  );
  items.forEach((item, i) => {
    const p = `input[${i}]`;
    const o = v.object(item, p);
    const type = o['type'] ?? 'message';
    if (type === 'message') {
      const role = v.string(o['role'], `${p}.role`);
      const content = textContent(o['content'], `${p}.content`);
      if (role === 'system' || role === 'developer') out.push({ role: 'system', content });
      else if (role === 'user' || role === 'assistant') out.push({ role, content });
      else
        throw badField(`${p}.role`, `'${role}' is not one of system, developer, user, assistant`);
    } else if (type === 'function_call') {
      const call = templateToolCall(
        v.string(o['call_id'], `${p}.call_id`),
        v.string(o['name'], `${p}.name`),
        v.string(o['arguments'], `${p}.arguments`),
        `${p}.arguments`,
      );
      names.set(call.id, call.function.name);
      // Calls made in one turn are one assistant message, as the chat form has them.
      const prev = out[out.length - 1];
      if (
        prev?.role === 'assistant' &&
        (prev.tool_calls !== undefined || isLastItemMessage(items, i))
      ) {
        prev.tool_calls = [...(prev.tool_calls ?? []), call];
      } else {
        out.push({ role: 'assistant', content: '', tool_calls: [call] });
      }
    } else if (type === 'function_call_output') {
      const id = v.string(o['call_id'], `${p}.call_id`);
      const output = o['output'];
      const content = typeof output === 'string' ? output : textContent(output, `${p}.output`);
      const name = names.get(id);
      out.push({
        role: 'tool',
        content,
        tool_call_id: id,
        ...(name !== undefined ? { name } : {}),
      });
    } else if (type === 'reasoning') {
      // Reasoning summaries are not part of the policy's prompt.
    } else {
      throw badField(
        `${p}.type`,
        `'${String(type)}' is not supported (message, function_call, function_call_output)`,
      );
    }
  });
  return out;
}

/** True when item i-1 is an assistant message item (the text part of the same turn). */
function isLastItemMessage(items: unknown[], i: number): boolean {
  const prev = items[i - 1] as Record<string, unknown> | undefined;
  return (
    prev !== undefined && (prev['type'] ?? 'message') === 'message' && prev['role'] === 'assistant'
  );
}

function responseTools(raw: unknown): ToolSpec[] {
  return v.array(raw, 'tools').map((t, i) => {
    const p = `tools[${i}]`;
    const o = v.object(t, p);
    if (o['type'] !== 'function')
      throw badField(
        `${p}.type`,
        `only 'function' tools are supported, got '${String(o['type'])}'`,
      );
    return toolSpec(o, p);
  });
}

type Item = Record<string, unknown> & { type: string; id: string };

function messageItem(text: string, status: 'in_progress' | 'completed'): Item {
  return {
    type: 'message',
    id: `msg_${randomBytes(12).toString('hex')}`,
    status,
    role: 'assistant',
    content: status === 'completed' ? [outputText(text)] : [],
  };
}

function outputText(text: string) {
  return { type: 'output_text', text, annotations: [], logprobs: [] };
}

function callItem(t: ToolCallOut): Item {
  return {
    type: 'function_call',
    id: `fc_${randomBytes(12).toString('hex')}`,
    call_id: t.id,
    name: t.name,
    arguments: t.arguments,
    status: 'completed',
  };
}

/** The output items of a whole answer: the message (when there is content), then the calls. */
function outputItems(r: CompletionResult): Item[] {
  const c = r.choices[0]!;
  return [
    ...(c.content !== null ? [messageItem(c.content, 'completed')] : []),
    ...c.toolCalls.map(callItem),
  ];
}

function responseObject(
  b: v.Json,
  meta: ResponseMeta,
  model: string,
  r: CompletionResult,
  tools: ToolSpec[],
  output: Item[],
) {
  const incomplete = r.choices[0]?.finishReason === 'length';
  return {
    id: meta.id,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: incomplete ? 'incomplete' : 'completed',
    incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    error: null,
    model,
    instructions: b['instructions'] ?? null,
    output,
    parallel_tool_calls: b['parallel_tool_calls'] ?? true,
    tool_choice: b['tool_choice'] ?? 'auto',
    tools: tools.map((t) => ({ type: 'function', ...t.function, strict: false })),
    temperature: b['temperature'] ?? 1,
    top_p: b['top_p'] ?? 1,
    max_output_tokens: b['max_output_tokens'] ?? null,
    previous_response_id: meta.previousResponseId,
    reasoning: null,
    store: meta.store,
    text: { format: { type: 'text' } },
    truncation: 'disabled',
    metadata: b['metadata'] ?? {},
    usage: {
      input_tokens: r.promptTokens,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: r.completionTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: r.promptTokens + r.completionTokens,
    },
  };
}

/**
 * Responses streaming events, sent as the answer is generated: `response.created` and
 * `response.in_progress` at the first, then per output item `response.output_item.added`, text
 * deltas (`response.output_text.delta`) or a call's arguments, `…done` events, and
 * `response.completed` (`response.incomplete` at the token cap) with the whole response. Text
 * that follows a tool call opens a new message item.
 */
class ResponsesStream implements StreamSink {
  private seq = 0;
  private started = false;
  private readonly items: Item[] = [];
  private open: { item: Item; text: string } | undefined;
  private readonly skeleton;

  constructor(
    private readonly res: ServerResponse,
    private readonly b: v.Json,
    private readonly meta: ResponseMeta,
    private readonly model: string,
    private readonly tools: ToolSpec[],
  ) {
    const empty = { promptTokens: 0, completionTokens: 0, choices: [], engineMs: 0 };
    this.skeleton = {
      ...responseObject(b, meta, model, empty, tools, []),
      status: 'in_progress',
      usage: null,
    };
  }

  text(_choice: ChoiceStream, delta: string): void {
    this.start();
    if (!this.open) {
      const item = messageItem('', 'in_progress');
      this.open = { item, text: '' };
      this.items.push(item);
      this.send('response.output_item.added', { output_index: this.at(item), item });
      this.send('response.content_part.added', { ...this.partOf(item), part: outputText('') });
    }
    this.open.text += delta;
    this.send('response.output_text.delta', {
      ...this.partOf(this.open.item),
      delta,
      logprobs: [],
    });
  }

  toolCall(_choice: ChoiceStream, _k: number, call: ToolCallOut): void {
    this.start();
    this.closeMessage();
    const item = callItem(call);
    this.items.push(item);
    const output_index = this.at(item);
    this.send('response.output_item.added', {
      output_index,
      item: { ...item, status: 'in_progress', arguments: '' },
    });
    this.send('response.function_call_arguments.delta', {
      item_id: item.id,
      output_index,
      delta: call.arguments,
    });
    this.send('response.function_call_arguments.done', {
      item_id: item.id,
      output_index,
      arguments: call.arguments,
      name: call.name,
    });
    this.send('response.output_item.done', { output_index, item });
  }

  done(): void {
    this.closeMessage();
  }

  /** Sends `response.completed` (or `response.incomplete`) and ends the stream. */
  end(r: CompletionResult): void {
    this.start();
    const response = responseObject(this.b, this.meta, this.model, r, this.tools, this.items);
    const type = response.status === 'incomplete' ? 'response.incomplete' : 'response.completed';
    this.send(type, { response });
    this.res.end();
  }

  /** Ends a started stream with an `error` event; false when nothing was sent yet. */
  fail(err: unknown): boolean {
    if (!this.started) return false;
    const message = err instanceof Error ? err.message : String(err);
    const code = err instanceof GatewayError ? err.code : 'engine_error';
    this.send('error', { code, message, param: null });
    this.res.end();
    return true;
  }

  private start(): void {
    if (this.started) return;
    this.started = true;
    startSse(this.res);
    this.send('response.created', { response: this.skeleton });
    this.send('response.in_progress', { response: this.skeleton });
  }

  private closeMessage(): void {
    const m = this.open;
    if (!m) return;
    this.open = undefined;
    const at = this.partOf(m.item);
    this.send('response.output_text.done', { ...at, text: m.text, logprobs: [] });
    this.send('response.content_part.done', { ...at, part: outputText(m.text) });
    Object.assign(m.item, { status: 'completed', content: [outputText(m.text)] });
    this.send('response.output_item.done', { output_index: at.output_index, item: m.item });
  }

  private at(item: Item): number {
    return this.items.indexOf(item);
  }

  private partOf(item: Item) {
    return { item_id: item.id, output_index: this.at(item), content_index: 0 };
  }

  private send(type: string, data: Record<string, unknown>): void {
    if (this.res.destroyed) return;
    sendSse(this.res, { type, sequence_number: this.seq++, ...data }, type);
  }
}
