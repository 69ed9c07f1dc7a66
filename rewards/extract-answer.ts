/**
 * AReaL's `extract_answer` for math data: find the final answer in a completion (`\boxed{}` with
 * nested braces, "The answer is", "final answer is", 答案是), or in a GSM8K gold solution the last
 * number, then normalise it with {@link stripString}.
 *
 * @module
 */
import { stripString } from './strip-string.ts';

/** Options of {@link extractAnswer}. */
export interface ExtractAnswerOptions {
  /** Fall back to the last number when no answer marker is found (used for gold solutions). @default false */
  useLastNumber?: boolean;
  /** Keep unit words (the reference skips unit removal for minerva_math / carp_en). @default false */
  skipUnit?: boolean;
}

function afterLastBoxed(s: string): string {
  const ans = s.split('boxed').pop() ?? '';
  if (ans.length === 0) return '';
  if (ans[0] !== '{') return (ans.split('$')[0] as string).trim();
  let depth = 1;
  let out = '';
  for (const c of ans.slice(1)) {
    if (c === '{') depth++;
    else if (c === '}') {
      depth--;
      if (depth === 0) break;
    }
    out += c;
  }
  return out;
}

/**
 * The normalised final answer of `text`, or `''` when there is none. Never throws.
 *
 * @example
 * extractAnswer('so \\boxed{\\frac{1}{2}} is it')       // '\\frac{1}{2}'
 * extractAnswer('The answer is $1,000.')                // '1,000'
 * extractAnswer('... #### 72', { useLastNumber: true }) // '72'
 */
export function extractAnswer(text: unknown, opts: ExtractAnswerOptions = {}): string {
  if (typeof text !== 'string') return '';
  try {
    const s = text.split('\u043a\u0438').join('');
    let pred: string;
    if (s.includes('final answer is $') && s.includes('$. I hope')) {
      pred = (
        s
          .split('final answer is $')
          .slice(1)
          .join('final answer is $')
          .split('$. I hope')[0] as string
      ).trim();
    } else if (s.includes('boxed')) {
      pred = afterLastBoxed(s);
    } else if (s.includes('he answer is')) {
      pred = (s.split('he answer is').pop() as string).trim();
    } else if (s.includes('final answer is')) {
      pred = (s.split('final answer is').pop() as string).trim();
    } else if (s.includes('答案是')) {
      pred = ((s.split('答案是')[1] as string).trim().split('\n\n')[0] as string).trim();
    } else if (opts.useLastNumber) {
      const nums = s
        .split(',')
        .join('')
        .match(/-?\d*\.?\d+/g);
      pred = nums && nums.length > 0 ? (nums[nums.length - 1] as string) : '';
    } else {
      pred = '';
    }
    pred = pred.replace(/\n\s*/g, '');
    if (pred !== '' && pred[0] === ':') pred = pred.slice(1);
    if (pred !== '' && pred.endsWith('.')) pred = pred.slice(0, -1);
    if (pred !== '' && pred.endsWith('/')) pred = pred.slice(0, -1);
    return stripString(pred, opts.skipUnit ?? false);
  } catch {
    return '';
  }
}
