/**
 * `POST /v1/chat/completions` bodies → what the gateway generates from: messages in the HF chat
 * template convention (assistant `tool_calls` with parsed `arguments`, `tool` turns with
 * `tool_call_id` and the tool's `name`), tool definitions, and sampling settings. Every field is
 * checked and a bad one answered with a 400 that names it.
 *
 * @module
 */
import { badField } from './errors.ts';
import { parseToolChoice, type ToolChoice, type ToolSpec } from './tool-choice.ts';
import * as v from './validate.ts';

/** A tool call inside an assistant message, as HF chat templates read it. */
export interface TemplateToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: Record<string, unknown> };
}

/** One message as the chat template receives it. */
export interface TemplateMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  tool_calls?: TemplateToolCall[];
  tool_call_id?: string;
  /** For `tool` turns: the called function's name (some templates print it). */
  name?: string;
}

/** Sampling settings of one request. */
export interface SamplingRequest {
  temperature?: number;
  topP?: number;
  /** Anthropic's `top_k` (ignored where the run fixes sampling). */
  topK?: number;
  maxTokens?: number;
  stop: string[];
  n: number;
  seed?: number;
  logprobs: boolean;
  topLogprobs: number;
}

/** What one completion request asks for, whichever endpoint it came through. */
export interface CompletionRequest {
  model: string;
  messages: TemplateMessage[];
  tools?: ToolSpec[];
  /** `none`: no tools in the prompt, no calls parsed; `required` or a name: a call is forced. */
  toolChoice: ToolChoice;
  /** `parallel_tool_calls`: false ends the answer after its first call. */
  parallelToolCalls: boolean;
  sampling: SamplingRequest;
  /**
   * Extra variables for the chat template (`chat_template_kwargs`, as vLLM and SGLang take them),
   * e.g. Qwen3's `{ enable_thinking: false }`.
   */
  templateVars?: Record<string, unknown>;
}

/** A parsed chat-completions body plus its streaming settings. */
export interface ChatRequest extends CompletionRequest {
  stream: boolean;
  includeUsage: boolean;
}

/** Parses a chat-completions body, or throws a 400 naming the first bad field. */
export function parseChatRequest(body: unknown): ChatRequest {
  const b = v.object(body, 'body');
  const model = v.string(b['model'], 'model');
  const rawMessages = v.array(b['messages'], 'messages');
  if (rawMessages.length === 0) throw badField('messages', 'must hold at least one message');
  const messages = chatMessages(rawMessages);
  const tools = v.optional(b['tools'], (t) => parseTools(t, 'tools'));
  const toolChoice = parseToolChoice(b['tool_choice'], tools);
  const maxTokens =
    v.optional(b['max_completion_tokens'], (x) => v.integer(x, 'max_completion_tokens', 1)) ??
    v.optional(b['max_tokens'], (x) => v.integer(x, 'max_tokens', 1));
  const streamOptions = v.optional(b['stream_options'], (x) => v.object(x, 'stream_options'));
  const topLogprobs =
    v.optional(b['top_logprobs'], (x) => v.integer(x, 'top_logprobs', 0, 20)) ?? 0;
  const logprobs = v.optional(b['logprobs'], (x) => v.boolean(x, 'logprobs')) ?? false;
  if (topLogprobs > 0 && !logprobs) throw badField('top_logprobs', 'needs logprobs: true');
  const sampling: SamplingRequest = {
    ...optionalSampling(b),
    ...(maxTokens !== undefined ? { maxTokens } : {}),
    stop: stopList(b['stop']),
    n: v.optional(b['n'], (x) => v.integer(x, 'n', 1, 16)) ?? 1,
    logprobs,
    topLogprobs,
  };
  const templateVars = v.optional(b['chat_template_kwargs'], templateKwargs);
  return {
    model,
    messages,
    ...(tools ? { tools } : {}),
    toolChoice,
    parallelToolCalls: parallelToolCalls(b),
    sampling,
    ...(templateVars ? { templateVars } : {}),
    stream: v.optional(b['stream'], (x) => v.boolean(x, 'stream')) ?? false,
    includeUsage:
      v.optional(streamOptions?.['include_usage'], (x) =>
        v.boolean(x, 'stream_options.include_usage'),
      ) ?? false,
  };
}

/** `temperature`, `top_p` and `seed`, each when given. */
export function optionalSampling(
  b: v.Json,
): Pick<SamplingRequest, 'temperature' | 'topP' | 'seed'> {
  const temperature = v.optional(b['temperature'], (x) => v.number(x, 'temperature', 0, 2));
  const topP = v.optional(b['top_p'], (x) => v.number(x, 'top_p', 0, 1));
  const seed = v.optional(b['seed'], (x) => v.integer(x, 'seed', -(2 ** 53) + 1));
  return {
    ...(temperature !== undefined ? { temperature } : {}),
    ...(topP !== undefined ? { topP } : {}),
    ...(seed !== undefined ? { seed } : {}),
  };
}

/** `parallel_tool_calls`, true unless the body says false (both endpoints name it so). */
export function parallelToolCalls(b: v.Json): boolean {
  return v.optional(b['parallel_tool_calls'], (x) => v.boolean(x, 'parallel_tool_calls')) ?? true;
}

function stopList(raw: unknown): string[] {
  if (raw === undefined || raw === null) return [];
  if (typeof raw === 'string') return raw === '' ? [] : [raw];
  const list = v.array(raw, 'stop');
  if (list.length > 4) throw badField('stop', `at most 4 sequences, got ${list.length}`);
  return list.map((s, i) => v.string(s, `stop[${i}]`)).filter((s) => s !== '');
}

/** Parses OpenAI chat tools (`{ type: 'function', function: { name, parameters } }`). */
export function parseTools(raw: unknown, param: string): ToolSpec[] {
  return v.array(raw, param).map((t, i) => {
    const p = `${param}[${i}]`;
    const o = v.object(t, p);
    if (o['type'] !== 'function')
      throw badField(`${p}.type`, `only 'function' tools are supported`);
    const fn = v.object(o['function'], `${p}.function`);
    return toolSpec(fn, `${p}.function`);
  });
}

/** One function definition (`name`, `description`, `parameters`) in the template's form. */
export function toolSpec(fn: v.Json, p: string): ToolSpec {
  const name = v.string(fn['name'], `${p}.name`);
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(name)) {
    throw badField(`${p}.name`, 'must be 1-64 letters, digits, _ . or -');
  }
  const description = v.optional(fn['description'], (x) => v.string(x, `${p}.description`));
  const parameters = v.optional(fn['parameters'], (x) => v.object(x, `${p}.parameters`));
  return {
    type: 'function',
    function: {
      name,
      ...(description !== undefined ? { description } : {}),
      ...(parameters !== undefined ? { parameters } : {}),
    },
  };
}

function chatMessages(raw: unknown[]): TemplateMessage[] {
  const callNames = new Map<string, string>();
  return raw.map((m, i) => {
    const p = `messages[${i}]`;
    const o = v.object(m, p);
    const role = v.string(o['role'], `${p}.role`);
    switch (role) {
      case 'system':
      case 'developer':
        return { role: 'system', content: textContent(o['content'], `${p}.content`) };
      case 'user':
        return { role: 'user', content: textContent(o['content'], `${p}.content`) };
      case 'assistant': {
        const content =
          o['content'] === undefined || o['content'] === null
            ? ''
            : textContent(o['content'], `${p}.content`);
        const calls = v.optional(o['tool_calls'], (x) => v.array(x, `${p}.tool_calls`)) ?? [];
        const toolCalls = calls.map((c, j) => {
          const q = `${p}.tool_calls[${j}]`;
          const co = v.object(c, q);
          const fn = v.object(co['function'], `${q}.function`);
          const call = templateToolCall(
            v.string(co['id'], `${q}.id`),
            v.string(fn['name'], `${q}.function.name`),
            v.string(fn['arguments'], `${q}.function.arguments`),
            `${q}.function.arguments`,
          );
          callNames.set(call.id, call.function.name);
          return call;
        });
        return {
          role: 'assistant',
          content,
          ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
        };
      }
      case 'tool': {
        const id = v.string(o['tool_call_id'], `${p}.tool_call_id`);
        const name = callNames.get(id);
        return {
          role: 'tool',
          content: textContent(o['content'], `${p}.content`),
          tool_call_id: id,
          ...(name !== undefined ? { name } : {}),
        };
      }
      default:
        throw badField(
          `${p}.role`,
          `'${role}' is not one of system, developer, user, assistant, tool`,
        );
    }
  });
}

/** A tool call with its JSON `arguments` parsed, as HF templates expect (they `tojson` them). */
export function templateToolCall(
  id: string,
  name: string,
  args: string,
  param: string,
): TemplateToolCall {
  let parsed: unknown;
  try {
    parsed = args.trim() === '' ? {} : JSON.parse(args);
  } catch {
    throw badField(param, 'is not valid JSON');
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw badField(param, 'must be a JSON object');
  }
  return { id, type: 'function', function: { name, arguments: parsed as Record<string, unknown> } };
}

/** A message's text: a string, or the concatenated `text` parts of a content array. */
export function textContent(raw: unknown, param: string): string {
  if (typeof raw === 'string') return raw;
  const parts = v.array(raw, param);
  return parts
    .map((part, i) => {
      const o = v.object(part, `${param}[${i}]`);
      const type = o['type'];
      if (type !== 'text' && type !== 'input_text' && type !== 'output_text') {
        throw badField(
          `${param}[${i}].type`,
          `only text parts are supported, got '${String(type)}'`,
        );
      }
      return v.string(o['text'], `${param}[${i}].text`);
    })
    .join('');
}

/** What the gateway itself hands the template: a request may not set these. */
const reservedTemplateVars = new Set(['messages', 'tools', 'add_generation_prompt']);

/**
 * `chat_template_kwargs`: an object of template variables. The ones the gateway renders with
 * (`messages`, `tools`, `add_generation_prompt`, the special tokens) are refused.
 */
function templateKwargs(x: unknown): Record<string, unknown> {
  const o = v.object(x, 'chat_template_kwargs');
  for (const k of Object.keys(o)) {
    if (reservedTemplateVars.has(k) || k.endsWith('_token'))
      throw badField(`chat_template_kwargs.${k}`, 'is set by the gateway, not the request');
  }
  return o;
}
