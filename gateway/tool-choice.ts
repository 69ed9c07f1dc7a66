/**
 * `tool_choice` and `parallel_tool_calls` enforced. `none` leaves the tools out of the prompt and
 * parses no calls; `auto` lets the model choose; `required` and a named function make the model
 * call by starting its answer for it: the opening of a call in the chat template's own spelling
 * (`<tool_call>\n{"name": "` for any call, through `"arguments": ` for a named one) is appended to
 * the prompt, so the policy generates only the rest. Those tokens are prompt tokens: recorded
 * masked out of the loss, never trained on; the next turn's prompt (the template rendering the
 * call) still extends the trajectory token for token. `parallel_tool_calls: false` ends the answer
 * with its first call: generation stops at the call's closing marker, and whatever an engine
 * generated past it is cut before it is recorded or answered.
 *
 * @module
 */
import type { GenerateResult } from '../engines/types.ts';
import type { ChatMessage, ChatTokenizer } from '../model/tokenizer.ts';
import { badField } from './errors.ts';
import type { ToolCallParser } from './tool-parsers.ts';
import * as v from './validate.ts';

/** A function tool in OpenAI's chat form, which is also the HF template convention. */
export interface ToolSpec {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

/** What the request asked: the three modes, or one named function. */
export type ToolChoice = 'auto' | 'none' | 'required' | { name: string };

/**
 * Parses `tool_choice` in the chat form (`{ type: 'function', function: { name } }`) or the
 * Responses form (`{ type: 'function', name }`); the function must be among `tools`.
 */
export function parseToolChoice(raw: unknown, tools: ToolSpec[] | undefined): ToolChoice {
  if (raw === undefined || raw === null || raw === 'auto') return 'auto';
  if (raw === 'none') return 'none';
  if (raw === 'required') {
    if (!tools?.length) throw badField('tool_choice', `'required' needs at least one tool`);
    return 'required';
  }
  if (typeof raw === 'string')
    throw badField('tool_choice', `'${raw}' is not one of none, auto, required`);
  const c = v.object(raw, 'tool_choice');
  if (c['type'] !== 'function')
    throw badField('tool_choice.type', `only 'function' is supported, got '${String(c['type'])}'`);
  const [param, name] =
    c['function'] !== undefined
      ? [
          'tool_choice.function.name',
          v.string(
            v.object(c['function'], 'tool_choice.function')['name'],
            'tool_choice.function.name',
          ),
        ]
      : ['tool_choice.name', v.string(c['name'], 'tool_choice.name')];
  if (!tools?.some((t) => t.function.name === name))
    throw badField(param, `no tool named '${name}' in tools`);
  return { name };
}

/** A function name no real tool has: where it lands in the rendered probe, the name goes. */
const probe = 'rtjob_probe_fn_0x7f';

/**
 * The text that starts the forced call, in the template's spelling, or '' when nothing is forced
 * (`auto`, `none`). Found by rendering a probe call with the template; a template that renders no
 * call in the parser's convention gets the parser's own default opening.
 */
export function forcedOpening(
  tokenizer: ChatTokenizer,
  parser: ToolCallParser,
  tools: ToolSpec[] | undefined,
  choice: ToolChoice,
): string {
  if (choice === 'auto' || choice === 'none') return '';
  if (!parser.opening || !parser.marker)
    throw badField('tool_choice', `the '${parser.name}' tool-call parser cannot force a call`);
  const name = choice === 'required' ? undefined : choice.name;
  const fallback = parser.opening(name);
  let text: string;
  try {
    text = tokenizer.applyChatTemplate(
      [
        { role: 'user', content: 'x' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [{ id: 'c0', type: 'function', function: { name: probe, arguments: {} } }],
        },
      ] as unknown as ChatMessage[],
      { addGenerationPrompt: false, ...(tools?.length ? { tools } : {}) },
    );
  } catch {
    return fallback;
  }
  const at = text.indexOf(probe);
  const start = at < 0 ? -1 : text.lastIndexOf(parser.marker, at);
  if (start < 0) return fallback;
  if (name === undefined) return text.slice(start, at);
  const args = /"arguments"\s*:\s*/.exec(text.slice(at + probe.length));
  if (!args) return fallback;
  const end = at + probe.length + args.index + args[0].length;
  return text.slice(start, at) + name + text.slice(at + probe.length, end);
}

/**
 * The stop string that ends an answer after its first call, when the request allows one call per
 * turn (`parallel_tool_calls: false`) and calls can be made; undefined otherwise.
 */
export function oneCallStop(
  parser: ToolCallParser,
  req: { tools?: ToolSpec[] | undefined; toolChoice: ToolChoice; parallelToolCalls: boolean },
): string | undefined {
  if (req.parallelToolCalls || req.toolChoice === 'none' || !req.tools?.length) return undefined;
  return parser.closer;
}

/**
 * How many leading tokens of `ids` hold the answer's first complete call (the answer being
 * `opening` followed by their text), or undefined when it has none. A prefix that holds a call
 * holds it in every longer prefix too, so a binary search finds the shortest.
 */
export function firstCallEnd(
  tokenizer: ChatTokenizer,
  parser: ToolCallParser,
  opening: string,
  ids: number[],
): number | undefined {
  const hasCall = (k: number): boolean =>
    parser
      .pieces(opening + tokenizer.decode(ids.slice(0, k), { skipSpecialTokens: false }))
      .some((p) => 'call' in p);
  if (!hasCall(ids.length)) return undefined;
  let [lo, hi] = [0, ids.length];
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (hasCall(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

/**
 * `out` ended after its first call's tokens: what an engine generated past them (a second call,
 * when it did not see the stop string) is dropped, so the trajectory records exactly what the
 * client is answered and never trains on tokens the agent did not see.
 */
export function firstCallOnly(
  tokenizer: ChatTokenizer,
  parser: ToolCallParser,
  opening: string,
  out: GenerateResult,
): GenerateResult {
  const k = firstCallEnd(tokenizer, parser, opening, out.outputTokens);
  if (k === undefined || k === out.outputTokens.length) return out;
  return {
    ...out,
    outputTokens: out.outputTokens.slice(0, k),
    outputLogprobs: out.outputLogprobs.slice(0, k),
    outputVersions: out.outputVersions.slice(0, k),
    ...(out.outputTopLogprobs ? { outputTopLogprobs: out.outputTopLogprobs.slice(0, k) } : {}),
    stopReason: 'stop',
  };
}
