/**
 * Token sampling from one row of logits: temperature, top-k, top-p, greedy. The reported logprob
 * is log softmax(logits / temperature) at the chosen token, i.e. under the tempered distribution
 * before top-k/top-p truncation — exactly what a trainer recomputes from the same weights at the
 * same temperature (truncation only narrows which tokens can be drawn).
 *
 * @module
 */

/** Sampling settings of one row (resolved from `GenerationConfig`). */
export interface SamplingParams {
  temperature: number;
  topK: number;
  topP: number;
  greedy: boolean;
}

/** Samples one token from `logits[offset .. offset + vocab)`. */
export function sampleToken(
  logits: Float32Array,
  offset: number,
  vocab: number,
  p: SamplingParams,
  rand: () => number,
): { token: number; logprob: number } {
  const t = p.temperature > 0 ? p.temperature : 1;
  let max = -Infinity;
  let arg = 0;
  for (let i = 0; i < vocab; i++) {
    const x = logits[offset + i]!;
    if (x > max) {
      max = x;
      arg = i;
    }
  }
  const probs = new Float64Array(vocab);
  let z = 0;
  for (let i = 0; i < vocab; i++) z += probs[i] = Math.exp((logits[offset + i]! - max) / t);
  const logZ = Math.log(z);
  const logprobOf = (i: number): number => (logits[offset + i]! - max) / t - logZ;
  if (p.greedy || p.temperature <= 0) return { token: arg, logprob: logprobOf(arg) };
  let candidates: number[] | undefined;
  if ((p.topK > 0 && p.topK < vocab) || p.topP < 1) {
    candidates = Array.from({ length: vocab }, (_, i) => i).sort((a, b) => probs[b]! - probs[a]!);
    if (p.topK > 0 && p.topK < vocab) candidates = candidates.slice(0, p.topK);
    if (p.topP < 1) {
      let mass = 0;
      let keep = 0;
      while (keep < candidates.length && mass < p.topP * z) mass += probs[candidates[keep++]!]!;
      candidates = candidates.slice(0, Math.max(1, keep));
    }
  }
  if (candidates) {
    let mass = 0;
    for (const i of candidates) mass += probs[i]!;
    let u = rand() * mass;
    for (const i of candidates)
      if ((u -= probs[i]!) <= 0) return { token: i, logprob: logprobOf(i) };
    const last = candidates[candidates.length - 1]!;
    return { token: last, logprob: logprobOf(last) };
  }
  let u = rand() * z;
  for (let i = 0; i < vocab; i++)
    if ((u -= probs[i]!) <= 0) return { token: i, logprob: logprobOf(i) };
  return { token: arg, logprob: logprobOf(arg) };
}

/**
 * The `k` most likely tokens of `logits[offset .. offset + vocab)` and their logprobs under the
 * same tempered distribution {@link sampleToken} reports (temperature 0 counts as 1, as there),
 * most likely first.
 */
export function topLogprobs(
  logits: Float32Array,
  offset: number,
  vocab: number,
  temperature: number,
  k: number,
): { ids: number[]; logprobs: number[] } {
  const t = temperature > 0 ? temperature : 1;
  let max = -Infinity;
  for (let i = 0; i < vocab; i++) max = Math.max(max, logits[offset + i]!);
  let z = 0;
  for (let i = 0; i < vocab; i++) z += Math.exp((logits[offset + i]! - max) / t);
  const logZ = Math.log(z);
  // Insertion into a short sorted list: k is at most 20.
  const ids: number[] = [];
  for (let i = 0; i < vocab; i++) {
    const x = logits[offset + i]!;
    if (ids.length === k && x <= logits[offset + ids[k - 1]!]!) continue;
    let j = Math.min(ids.length, k - 1);
    while (j > 0 && logits[offset + ids[j - 1]!]! < x) j--;
    ids.splice(j, 0, i);
    if (ids.length > k) ids.pop();
  }
  return { ids, logprobs: ids.map((i) => (logits[offset + i]! - max) / t - logZ) };
}

/** Re-exported from `prng.ts` (dependency-free) for existing importers. */
export { seededRandom } from './prng.ts';
