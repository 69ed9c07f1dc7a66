/**
 * GSM8K rewards: AReaL's rule (`process_results`: extract the completion's answer, take the gold
 * solution's last number, compare with `mathEqual`) and verl's `strict` / `flexible` modes.
 *
 * @module
 */
import { extractAnswer } from './extract-answer.ts';
import { mathEqual } from './math-equal.ts';

/** Which checking rule {@link gsm8kReward} applies. */
export type Gsm8kMode =
  /** AReaL: `\boxed{}` / "The answer is" in the completion, math-aware comparison. */
  | 'areal'
  /** verl strict: the last `#### N` within the completion's last 300 characters, exact string match. */
  | 'strict'
  /** verl flexible: the last number-like token in the last 300 characters, exact string match. */
  | 'flexible';

/** Options of {@link gsm8kReward}. */
export interface Gsm8kRewardOptions {
  /** @default 'areal' */
  mode?: Gsm8kMode;
}

const CLIP_CHARS = 300;

/** The gold answer of a GSM8K solution in verl's form: the number after `#### `, commas removed. */
export function verlGoldAnswer(goldSolution: string): string {
  const m = /#### (-?[0-9.,]+)/.exec(goldSolution);
  return (m ? (m[1] as string) : goldSolution.trim()).split(',').join('');
}

/** verl's `extract_solution`: the answer a completion gives under `strict` or `flexible`, or undefined. */
export function verlExtract(completion: string, mode: 'strict' | 'flexible'): string | undefined {
  const s = completion.length > CLIP_CHARS ? completion.slice(-CLIP_CHARS) : completion;
  if (mode === 'strict') {
    const all = [...s.matchAll(/#### (-?[0-9.,]+)/g)];
    const last = all[all.length - 1];
    return last ? (last[1] as string).split(',').join('').split('$').join('') : undefined;
  }
  const all = s.match(/-?[0-9.,]+/g) ?? [];
  for (let i = all.length - 1; i >= 0; i--) if (all[i] !== '' && all[i] !== '.') return all[i];
  return undefined;
}

/**
 * 1 when the completion's final answer matches the gold solution (a GSM8K `answer` ending in
 * `#### N`, or a bare number), else 0. Malformed or empty input gives 0; it never throws.
 *
 * @example
 * gsm8kReward('... so she has \\boxed{72} clips.', 'Natalia sold 48/2 = 24 ... #### 72') // 1
 * gsm8kReward('#### 72', '#### 72', { mode: 'strict' })                              // 1
 */
export function gsm8kReward(
  completion: unknown,
  goldSolution: unknown,
  opts: Gsm8kRewardOptions = {},
): 0 | 1 {
  if (typeof completion !== 'string' || typeof goldSolution !== 'string') return 0;
  try {
    const mode = opts.mode ?? 'areal';
    if (mode === 'strict' || mode === 'flexible') {
      const answer = verlExtract(completion, mode);
      return answer !== undefined && answer === verlGoldAnswer(goldSolution) ? 1 : 0;
    }
    const pred = extractAnswer(completion, { useLastNumber: false });
    const gold = extractAnswer(goldSolution, { useLastNumber: true });
    const empty = (s: string) => ['', 'None', 'none'].includes(s.trim());
    if (empty(pred) || empty(gold)) return 0;
    return mathEqual(pred, gold) ? 1 : 0;
  } catch {
    return 0;
  }
}
