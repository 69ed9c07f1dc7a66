/**
 * Tool-call parsers: they turn the text a model generated into the assistant's content and its
 * tool calls, by the convention its chat template taught it. Chosen by name
 * (`--tool-call-parser`), as in vLLM and SGLang.
 *
 * @module
 */
import { InvalidArgumentError } from '../runtime/errors.ts';

/** One tool call as parsed from generated text; `arguments` is JSON text (OpenAI's form). */
export interface ParsedToolCall {
  name: string;
  arguments: string;
}

/** The assistant message a completion becomes. */
export interface ParsedCompletion {
  /** Text outside tool calls (trimmed when there are calls); null when nothing is left. */
  content: string | null;
  toolCalls: ParsedToolCall[];
}

/** A piece of generated text: plain text, or one parsed tool call. */
export type ParsedPiece = { text: string } | { call: ParsedToolCall };

/** A named parser of generated text. */
export interface ToolCallParser {
  readonly name: string;
  /** The text in order as plain text and calls; {@link parseCompletion} joins them. */
  pieces(text: string): ParsedPiece[];
  /**
   * Length of the prefix of `text` whose pieces no continuation can change (streaming sends
   * that much): the text before an unclosed or partly generated opening marker.
   */
  settled(text: string): number;
  /** The text every call starts with (`<tool_call>`); unset when calls cannot be forced. */
  readonly marker?: string;
  /**
   * The text every call ends with (`</tool_call>`): a stop string that ends the answer after its
   * first call (`parallel_tool_calls: false`); unset when the parser has no calls.
   */
  readonly closer?: string;
  /**
   * A call's opening up to where the model continues: up to the name, or with `name` through
   * the arguments' key. Used when the chat template shows no call to copy the spelling from.
   */
  opening?(name?: string): string;
}

/**
 * The assistant message `text` becomes: the plain text (trimmed when there are calls; null when
 * nothing is left) and the calls.
 */
export function parseCompletion(parser: ToolCallParser, text: string): ParsedCompletion {
  const pieces = parser.pieces(text);
  const toolCalls = pieces.flatMap((p) => ('call' in p ? [p.call] : []));
  let content = pieces.map((p) => ('text' in p ? p.text : '')).join('');
  if (toolCalls.length > 0) content = content.trim();
  return { content: content === '' ? null : content, toolCalls };
}

const open = '<tool_call>';
const close = '</tool_call>';

/**
 * Hermes / Qwen 2.5+ convention: each call is `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
 * A block whose JSON does not parse, or lacks a string `name`, stays in the content, so a malformed
 * call reaches the agent as text rather than vanishing. An unclosed block at the end (generation
 * stopped inside it) is text too.
 */
const hermes: ToolCallParser = {
  name: 'hermes',
  marker: open,
  closer: close,
  opening: (name) =>
    name === undefined ? `${open}\n{"name": "` : `${open}\n{"name": "${name}", "arguments": `,
  pieces(text) {
    const out: ParsedPiece[] = [];
    let last = 0;
    for (let at = text.indexOf(open); at >= 0; ) {
      const end = text.indexOf(close, at + open.length);
      if (end < 0) break;
      const call = callOf(text.slice(at + open.length, end));
      if (call !== undefined) {
        if (at > last) out.push({ text: text.slice(last, at) });
        out.push({ call });
        last = end + close.length;
      }
      at = text.indexOf(open, end + close.length);
    }
    if (last < text.length) out.push({ text: text.slice(last) });
    return out;
  },
  settled(text) {
    let from = 0;
    for (let at = text.indexOf(open); at >= 0; at = text.indexOf(open, from)) {
      const end = text.indexOf(close, at + open.length);
      if (end < 0) return at;
      from = end + close.length;
    }
    // The text may end in the first characters of an opening marker.
    for (let k = Math.min(open.length - 1, text.length - from); k > 0; k--)
      if (text.endsWith(open.slice(0, k))) return text.length - k;
    return text.length;
  },
};

function callOf(body: string): ParsedToolCall | undefined {
  let v: unknown;
  try {
    v = JSON.parse(body.trim());
  } catch {
    return undefined;
  }
  if (v === null || typeof v !== 'object') return undefined;
  const o = v as Record<string, unknown>;
  if (typeof o['name'] !== 'string' || o['name'] === '') return undefined;
  const args = o['arguments'] ?? o['parameters'] ?? {};
  return { name: o['name'], arguments: typeof args === 'string' ? args : JSON.stringify(args) };
}

/** No tool calls: everything generated is content. */
const none: ToolCallParser = {
  name: 'none',
  pieces: (text) => (text === '' ? [] : [{ text }]),
  settled: (text) => text.length,
};

/** Every parser by name; `qwen` is the Hermes format Qwen's templates use. */
export const toolCallParsers: Readonly<Record<string, ToolCallParser>> = {
  hermes,
  qwen: hermes,
  none,
};

/** The parser called `name`, or an InvalidArgumentError listing the known names. */
export function toolCallParser(name: string): ToolCallParser {
  const p = toolCallParsers[name];
  if (!p) {
    throw new InvalidArgumentError(
      `unknown tool-call parser '${name}' (known: ${Object.keys(toolCallParsers).join(', ')})`,
    );
  }
  return p;
}
