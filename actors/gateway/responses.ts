/**
 * `POST /v1/responses`, the stateless subset the OpenAI Agents SDK and the Vercel AI SDK use by
 * default: `input` as a string or items (messages, `function_call`, `function_call_output`;
 * `reasoning` items are skipped), `instructions`, function `tools`, sampling, and `stream: true`
 * with the documented events. Nothing is stored: `previous_response_id` is refused.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import {
  optionalSampling,
  templateToolCall,
  textContent,
  toolSpec,
  type CompletionRequest,
  type TemplateMessage,
  type ToolSpec,
} from './chat-request.ts';
import { complete, type CompletionContext, type CompletionResult } from './completion.ts';
import { badField } from './errors.ts';
import { sendSse, startSse } from './sse.ts';
import type { TokenSession } from './token-session.ts';
import * as v from './validate.ts';

/** Parses the body, generates one completion and answers it whole or as events. */
export async function handleResponses(
  res: ServerResponse,
  body: unknown,
  ctx: CompletionContext,
  model: string,
  session: TokenSession | undefined,
  abandoned: () => boolean,
): Promise<CompletionResult> {
  const b = v.object(body, 'body');
  if (b['previous_response_id'] !== undefined && b['previous_response_id'] !== null) {
    throw badField(
      'previous_response_id',
      'this gateway stores no responses; send the whole conversation in input',
    );
  }
  const instructions = v.optional(b['instructions'], (x) => v.string(x, 'instructions'));
  const messages = [
    ...(instructions ? [{ role: 'system' as const, content: instructions }] : []),
    ...inputMessages(b['input']),
  ];
  if (messages.length === 0) throw badField('input', 'must hold at least one message');
  const tools = v.optional(b['tools'], (x) => responseTools(x));
  const maxTokens = v.optional(b['max_output_tokens'], (x) => v.integer(x, 'max_output_tokens', 1));
  const choice = b['tool_choice'];
  const req: CompletionRequest = {
    model,
    messages,
    ...(tools?.length ? { tools } : {}),
    parseTools: choice !== 'none',
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
  const result = await complete(ctx, req, session, abandoned);
  const response = responseObject(b, model, result, tools ?? []);
  if (!stream) {
    const text = JSON.stringify(response);
    res.writeHead(200, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
    });
    res.end(text);
    return result;
  }
  streamResponse(res, response);
  return result;
}

function inputMessages(raw: unknown): TemplateMessage[] {
  if (typeof raw === 'string') return [{ role: 'user', content: raw }];
  const items = v.array(raw, 'input');
  const out: TemplateMessage[] = [];
  const names = new Map<string, string>();
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

function responseObject(b: v.Json, model: string, r: CompletionResult, tools: ToolSpec[]) {
  const c = r.choices[0]!;
  const output: Item[] = [];
  if (c.content !== null) {
    output.push({
      type: 'message',
      id: `msg_${randomBytes(12).toString('hex')}`,
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text: c.content, annotations: [], logprobs: [] }],
    });
  }
  for (const t of c.toolCalls) {
    output.push({
      type: 'function_call',
      id: `fc_${randomBytes(12).toString('hex')}`,
      call_id: t.id,
      name: t.name,
      arguments: t.arguments,
      status: 'completed',
    });
  }
  const incomplete = c.finishReason === 'length';
  return {
    id: `resp_${randomBytes(12).toString('hex')}`,
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
    previous_response_id: null,
    reasoning: null,
    store: false,
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

function streamResponse(res: ServerResponse, response: ReturnType<typeof responseObject>): void {
  let seq = 0;
  const send = (type: string, data: Record<string, unknown>) =>
    sendSse(res, { type, sequence_number: seq++, ...data }, type);
  startSse(res);
  const pending = {
    ...response,
    status: 'in_progress',
    output: [],
    usage: null,
    incomplete_details: null,
  };
  send('response.created', { response: pending });
  send('response.in_progress', { response: pending });
  response.output.forEach((item, output_index) => {
    if (item.type === 'message') {
      const part = (item['content'] as { text: string }[])[0]!;
      const at = { item_id: item.id, output_index, content_index: 0 };
      send('response.output_item.added', {
        output_index,
        item: { ...item, status: 'in_progress', content: [] },
      });
      send('response.content_part.added', {
        ...at,
        part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
      });
      send('response.output_text.delta', { ...at, delta: part.text, logprobs: [] });
      send('response.output_text.done', { ...at, text: part.text, logprobs: [] });
      send('response.content_part.done', { ...at, part });
    } else {
      send('response.output_item.added', {
        output_index,
        item: { ...item, status: 'in_progress', arguments: '' },
      });
      send('response.function_call_arguments.delta', {
        item_id: item.id,
        output_index,
        delta: item['arguments'],
      });
      send('response.function_call_arguments.done', {
        item_id: item.id,
        output_index,
        arguments: item['arguments'],
        name: item['name'],
      });
    }
    send('response.output_item.done', { output_index, item });
  });
  send(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', {
    response,
  });
  res.end();
}
