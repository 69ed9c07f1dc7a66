/**
 * Tool-call parsers: they turn the text a model generated into the assistant's content and its
 * tool calls, by the convention its chat template taught it. Chosen by name
 * (`--tool-call-parser`), as in vLLM and SGLang.
 *
 * @module
 */

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

/** A named parser of generated text. */
export interface ToolCallParser {
  readonly name: string;
  parse(text: string): ParsedCompletion;
}

/**
 * Hermes / Qwen 2.5+ convention: each call is `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
 * A block whose JSON does not parse, or lacks a string `name`, stays in the content, so a malformed
 * call reaches the agent as text rather than vanishing. An unclosed block at the end (generation
 * stopped inside it) is text too.
 */
const hermes: ToolCallParser = {
  name: 'hermes',
  parse(text) {
    const toolCalls: ParsedToolCall[] = [];
    const kept: string[] = [];
    const re = /<tool_call>([\s\S]*?)<\/tool_call>/g;
    let last = 0;
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      const call = callOf(m[1]!);
      if (call === undefined) continue;
      kept.push(text.slice(last, m.index));
      toolCalls.push(call);
      last = m.index + m[0].length;
    }
    if (toolCalls.length === 0) return { content: text === '' ? null : text, toolCalls };
    kept.push(text.slice(last));
    const content = kept.join('').trim();
    return { content: content === '' ? null : content, toolCalls };
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
  parse: (text) => ({ content: text === '' ? null : text, toolCalls: [] }),
};

/** Every parser by name; `qwen` is the Hermes format Qwen's templates use. */
export const toolCallParsers: Readonly<Record<string, ToolCallParser>> = {
  hermes,
  qwen: hermes,
  none,
};

/** The parser called `name`, or a RangeError listing the known names. */
export function toolCallParser(name: string): ToolCallParser {
  const p = toolCallParsers[name];
  if (!p) {
    throw new RangeError(
      `unknown tool-call parser '${name}' (known: ${Object.keys(toolCallParsers).join(', ')})`,
    );
  }
  return p;
}
