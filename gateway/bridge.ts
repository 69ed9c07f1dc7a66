/**
 * Bridge mode: a turn whose re-rendered prompt no longer extends the recorded tokens (a template
 * that drops earlier `<think>` blocks, one that renders the model's output differently) is still
 * appended to the trajectory, as the recorded prompt + completion ids followed by the rendered new
 * messages, whenever that is provably what the agent sent:
 *
 * - the request's messages start with the recorded turn's messages, unchanged;
 * - then comes the assistant message the gateway answered (content and calls), unchanged;
 * - after it only new non-assistant messages (tool results, user turns): sampled text is never
 *   re-rendered in place of the model's own tokens;
 * - the tools are the same, and the recorded completion ended with the end token, so the new
 *   text starts on a special-token boundary and tokenizing it alone gives the ids it would get
 *   in place;
 * - the template renders the new messages the same whatever the answer's content was (checked
 *   with two different stand-in contents).
 *
 * Otherwise the reason is returned and the caller starts a new trajectory (a break). A request
 * with no more messages than the turn and its answer does not continue it at all (a new sample of
 * a turn, another conversation): `undefined`, no break.
 *
 * @module
 */
import type { ChatMessage, ChatTokenizer } from '../model/tokenizer.ts';
import type { TemplateMessage } from './chat-request.ts';
import type { ToolSpec } from './tool-choice.ts';

/** What the session keeps of the last turn appended to a trajectory. */
export interface RecordedTurn {
  /** The request's messages. */
  messages: TemplateMessage[];
  /** The tools rendered into its prompt. */
  tools: ToolSpec[] | undefined;
  /** The template variables it was rendered with (`chat_template_kwargs`). */
  templateVars?: Record<string, unknown> | undefined;
  /** The answer as the client got it. */
  answer: { content: string | null; toolCalls: { name: string; arguments: string }[] };
  /** The completion ended with the tokenizer's end token. */
  endsWithEos: boolean;
}

/** What a new request renders: its messages and tools, and the forced opening of a call. */
export interface NextTurn {
  messages: TemplateMessage[];
  tools: ToolSpec[] | undefined;
  templateVars?: Record<string, unknown> | undefined;
  opening: string;
  /** Bridge mode is on; off, a continuation is only reported as a break. */
  enabled: boolean;
}

// Stand-ins for the answer's content; two, so a template that lets it change the rest is caught.
const standIns = ['rtjob-bridge-a', 'rtjob-bridge-b'];

/**
 * The ids that continue `recordedIds` (ending with `turn`'s completion) with the messages `next`
 * adds, or the reason that cannot be proven safe; `undefined` when `next` does not continue it.
 */
export function bridgeIds(
  tok: ChatTokenizer,
  recordedIds: readonly number[],
  turn: RecordedTurn,
  next: NextTurn,
): number[] | { reason: string } | undefined {
  const n = turn.messages.length;
  const m = next.messages;
  if (m.length <= n + 1) return undefined;
  if (!next.enabled) return { reason: 'bridge mode is off' };
  for (let i = 0; i < n; i++) {
    if (!sameJson(m[i], turn.messages[i]))
      return { reason: `messages[${i}] differs from the recorded history (the agent edited it)` };
  }
  if (!sameAnswer(m[n]!, turn.answer))
    return { reason: `messages[${n}] is not the answer the gateway gave (the agent rewrote it)` };
  const added = m.slice(n + 1);
  if (added.some((x) => x.role === 'assistant'))
    return { reason: 'assistant text after the answer would be re-rendered, not generated' };
  if (!sameJson(next.tools ?? [], turn.tools ?? []))
    return { reason: 'the tools differ from the recorded turn' };
  if (!sameJson(next.templateVars ?? {}, turn.templateVars ?? {}))
    return { reason: 'chat_template_kwargs differ from the recorded turn' };
  const eos = tok.eosTokenId;
  if (!turn.endsWithEos || eos === undefined)
    return {
      reason: 'the answer did not end with the end token (cut by max_tokens or a stop string)',
    };
  const eosText = tok.decode([eos], { skipSpecialTokens: false });
  const tails = standIns.map((standIn) => {
    const anchor = { ...m[n]!, content: standIn };
    let text: string;
    try {
      text = tok.applyChatTemplate(
        [...m.slice(0, n), anchor, ...added] as unknown as ChatMessage[],
        {
          addGenerationPrompt: true,
          ...(next.tools?.length ? { tools: next.tools } : {}),
          ...(next.templateVars ? { extra: next.templateVars } : {}),
        },
      );
    } catch {
      return undefined;
    }
    const at = text.lastIndexOf(standIn);
    const end = at < 0 ? -1 : text.indexOf(eosText, at + standIn.length);
    return end < 0 ? undefined : text.slice(end + eosText.length);
  });
  if (tails[0] === undefined || tails[0] !== tails[1])
    return {
      reason:
        'the template renders no end token after the answer, or renders the new messages depending on it',
    };
  return [...recordedIds, ...tok.encode(tails[0] + next.opening)];
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** The assistant message a client sent back is the answer it got (ids aside). */
function sameAnswer(m: TemplateMessage, a: RecordedTurn['answer']): boolean {
  if (m.role !== 'assistant' || m.content !== (a.content ?? '')) return false;
  const calls = m.tool_calls ?? [];
  return (
    calls.length === a.toolCalls.length &&
    calls.every(
      (c, i) =>
        c.function.name === a.toolCalls[i]!.name &&
        sameJson(c.function.arguments, JSON.parse(a.toolCalls[i]!.arguments)),
    )
  );
}
