/**
 * Packing for the trainer: split a batch of variable-length samples into micro-batches that fit a
 * token budget, and give every token a loss weight computed from the whole batch, so the sum of
 * micro-batch losses (and gradients) equals the full-batch loss under any aggregation mode.
 *
 * @module
 */
import { AlgorithmError, invalidOption } from './errors.ts';
import { checkAggregation, type AggregationOptions } from './loss-aggregation.ts';
import type { Numbers } from './validate.ts';

/**
 * Per-token loss weights from the whole batch's masks: `m/N` (token-mean, N = all action tokens),
 * `m/(S·n_i)` (seq-mean-token-mean, S = sequences with any action token, n_i = its tokens), or
 * `m/(B·C)` (seq-mean-token-sum-norm). `Σ l·w` over any partition of the rows then adds up to the
 * full-batch aggregate. A batch without action tokens gets all-zero weights.
 *
 * @example
 * lossWeights([[0, 1, 1], [1]]) // [[0, 1/3, 1/3], [1/3]]
 */
export function lossWeights(
  masks: readonly Numbers[],
  opts: AggregationOptions = {},
): Float32Array[] {
  checkAggregation(opts);
  const agg = opts.lossAggMode ?? 'token-mean';
  const counts = masks.map((m) => {
    let c = 0;
    for (let t = 0; t < m.length; t++) c += m[t] as number;
    return c;
  });
  const total = counts.reduce((a, b) => a + b, 0);
  const seqs = counts.filter((c) => c > 0).length;
  return masks.map((m, r) => {
    let scale: number;
    if (agg === 'token-mean') scale = total > 0 ? 1 / total : 0;
    else if (agg === 'seq-mean-token-mean')
      scale = (counts[r] as number) > 0 ? 1 / (seqs * (counts[r] as number)) : 0;
    else scale = 1 / (masks.length * (opts.lossNormConstant as number));
    const w = new Float32Array(m.length);
    for (let t = 0; t < m.length; t++) w[t] = (m[t] as number) * scale;
    return w;
  });
}

/** One micro-batch: indices into the batch, and its token count. */
export interface MicroBatch {
  indices: number[];
  tokens: number;
}

/** Options of {@link packMicroBatches}. */
export interface PackOptions {
  /** Token budget per micro-batch (`--train-max-tokens-per-gpu`). */
  maxTokens: number;
  /** Cap on samples per micro-batch; unset means no cap. */
  maxSamples?: number;
}

/**
 * First-fit-decreasing bin packing of sequence lengths under `maxTokens`. A sequence longer than
 * the budget gets a micro-batch of its own (it cannot be split). Each micro-batch lists its
 * indices in ascending order; micro-batches are ordered by their first index, so the result is
 * deterministic. Every index appears exactly once.
 */
export function packMicroBatches(lengths: readonly number[], opts: PackOptions): MicroBatch[] {
  const { maxTokens } = opts;
  const maxSamples = opts.maxSamples ?? Infinity;
  if (!(Number.isInteger(maxTokens) && maxTokens > 0)) {
    throw invalidOption('--train-max-tokens-per-gpu', `must be an integer > 0 (got ${maxTokens})`);
  }
  if (!(maxSamples >= 1))
    throw invalidOption('--micro-train-batch-size', `must be >= 1 (got ${maxSamples})`);
  lengths.forEach((l, i) => {
    if (!(Number.isInteger(l) && l >= 0)) {
      throw new AlgorithmError('SHAPE_MISMATCH', `lengths[${i}] = ${l} is not a length`, {
        field: 'lengths',
        index: i,
      });
    }
  });
  const order = lengths
    .map((_, i) => i)
    .sort((a, b) => (lengths[b] as number) - (lengths[a] as number) || a - b);
  const bins: MicroBatch[] = [];
  for (const i of order) {
    const len = lengths[i] as number;
    const bin = bins.find((b) => b.tokens + len <= maxTokens && b.indices.length < maxSamples);
    if (bin) {
      bin.indices.push(i);
      bin.tokens += len;
    } else {
      bins.push({ indices: [i], tokens: len });
    }
  }
  for (const b of bins) b.indices.sort((x, y) => x - y);
  return bins.sort((a, b) => (a.indices[0] as number) - (b.indices[0] as number));
}

/** Options of {@link microBatches}. */
export interface MicroBatchOptions {
  /** Samples per micro-batch (`--micro-train-batch-size`). */
  maxSamples: number;
  /** Token budget per micro-batch (`--train-max-tokens-per-gpu`); unset cuts by count only. */
  maxTokens?: number;
}

/**
 * How a trainer or critic cuts one optimizer step into micro-batches. With a token budget,
 * {@link packMicroBatches} (at most `maxSamples` each); without one, the samples sorted by length
 * (stably) and cut every `maxSamples`, so each micro-batch pads to similar lengths. Every index
 * appears exactly once; {@link lossWeights} makes the split irrelevant to the loss.
 *
 * @example
 * microBatches([9, 5, 9, 4], { maxSamples: 2 }).map((b) => b.indices) // [[3, 1], [0, 2]]
 */
export function microBatches(lengths: readonly number[], opts: MicroBatchOptions): MicroBatch[] {
  if (opts.maxTokens !== undefined)
    return packMicroBatches(lengths, { ...opts, maxTokens: opts.maxTokens });
  if (!(Number.isInteger(opts.maxSamples) && opts.maxSamples >= 1))
    throw invalidOption(
      '--micro-train-batch-size',
      `must be an integer >= 1 (got ${opts.maxSamples})`,
    );
  const order = lengths
    .map((_, i) => i)
    .sort((a, b) => (lengths[a] as number) - (lengths[b] as number));
  const out: MicroBatch[] = [];
  for (let k = 0; k < order.length; k += opts.maxSamples) {
    const indices = order.slice(k, k + opts.maxSamples);
    out.push({ indices, tokens: indices.reduce((n, i) => n + (lengths[i] as number), 0) });
  }
  return out;
}

/** Options of {@link rankMicroBatches}: the micro-batch limits, and which data-parallel rank. */
export interface RankMicroBatchOptions extends MicroBatchOptions {
  rank: number;
  worldSize: number;
  /**
   * The row length at which attention (quadratic in the length) costs as much as the rest of a
   * row's forward and backward (linear): a row of length T costs T × (1 + T / attentionLength).
   * Every rank must pass the same value. Unset: cost is linear in the padded tokens.
   */
  attentionLength?: number;
}

/**
 * One data-parallel rank's micro-batches of an optimizer step. The step's samples, sorted by
 * length, are split into `worldSize` contiguous shares of about equal padded cost (rows × the
 * cost of the longest row, summed over the share's micro-batches of at most `maxSamples`), so no
 * rank idles long at the all-reduce waiting for the one that got the long samples; its share is
 * then cut by {@link microBatches}. Every rank computes the same split, and every index of
 * `lengths` lands in exactly one rank's micro-batches (a rank may get none when there are few
 * samples).
 *
 * @example
 * // the two longest samples cost as much as the four shortest
 * rankMicroBatches([2, 2, 2, 2, 4, 4], { maxSamples: 4, rank: 1, worldSize: 2 }) // indices [[4, 5]]
 */
export function rankMicroBatches(
  lengths: readonly number[],
  opts: RankMicroBatchOptions,
): MicroBatch[] {
  const { rank, worldSize, attentionLength, ...cut } = opts;
  if (worldSize <= 1) return microBatches(lengths, cut);
  const order = lengths
    .map((_, i) => i)
    .sort((a, b) => (lengths[a] as number) - (lengths[b] as number));
  const q = attentionLength && attentionLength > 0 ? 1 / attentionLength : 0;
  const rowCost = order.map((i) => {
    const t = lengths[i] as number;
    return t * (1 + t * q);
  });
  const w = (k: number) => rowCost[k] as number;
  const m = Math.max(1, cut.maxSamples);
  // Starts of contiguous shares of the sorted order, each of padded cost at most `cap`. Lengths
  // ascend, so a micro-batch's longest row is its last and the cost grows in O(1) per sample.
  const split = (cap: number): number[] => {
    const starts = [0];
    let cost = 0;
    let rows = 0; // in the share's last micro-batch
    for (let k = 0; k < order.length; k++) {
      const opens = rows === 0 || rows === m;
      const add = opens ? w(k) : (rows + 1) * w(k) - rows * w(k - 1);
      if (cost + add > cap && rows > 0) {
        starts.push(k);
        cost = w(k);
        rows = 1;
      } else {
        cost += add;
        rows = opens ? 1 : rows + 1;
      }
    }
    return starts;
  };
  // The smallest cap that needs at most `worldSize` shares; costs are not integers, so bisect
  // to a fraction of one row's cost (a fixed number of halvings: every rank finds the same cap).
  let lo = order.length ? w(order.length - 1) : 0;
  let hi = costOf(rowCost, m);
  for (let i = 0; i < 64 && hi - lo > 1e-6 * hi; i++) {
    const mid = (lo + hi) / 2;
    if (split(mid).length <= worldSize) hi = mid;
    else lo = mid;
  }
  const starts = split(hi);
  const from = starts[rank];
  if (from === undefined) return [];
  const share = order.slice(from, starts[rank + 1] ?? order.length);
  return microBatches(
    share.map((i) => lengths[i] as number),
    cut,
  ).map((b) => ({ indices: b.indices.map((j) => share[j]!), tokens: b.tokens }));
}

/** Padded cost of ascending row costs `sorted` cut every `m`: rows × costliest row, summed. */
function costOf(sorted: readonly number[], m: number): number {
  let c = 0;
  for (let k = 0; k < sorted.length; k += m) {
    const end = Math.min(sorted.length, k + m);
    c += (end - k) * (sorted[end - 1] as number);
  }
  return c;
}

/** Rows of one micro-batch, right-padded into a dense `[rows, width]` Float32Array. */
export function padRows(
  rows: readonly Numbers[],
  width?: number,
  pad = 0,
): { data: Float32Array; shape: [number, number] } {
  const w = width ?? rows.reduce((m, r) => Math.max(m, r.length), 0);
  const data = new Float32Array(rows.length * w).fill(pad);
  rows.forEach((r, i) => {
    if (r.length > w)
      throw new AlgorithmError('SHAPE_MISMATCH', `row ${i} has length ${r.length} > width ${w}`, {
        field: 'rows',
        index: i,
      });
    for (let t = 0; t < r.length; t++) data[i * w + t] = r[t] as number;
  });
  return { data, shape: [rows.length, w] };
}

/**
 * Per-token next-token rows of sequences packed end to end into one row (`--packing-samples`),
 * laid out as the packed row's predictions: sequence i's row (its length minus one entries) at
 * the sequence's start, and 0 where its last token would predict the next sequence's first, so
 * a mask or weight laid out here never trains across sequences. Width: total length − 1.
 *
 * @example
 * packedRows([[1, 1], [2]], [3, 2]).data // [1, 1, 0, 2]
 */
export function packedRows(
  rows: readonly Numbers[],
  lengths: readonly number[],
): { data: Float32Array; shape: [number, number] } {
  const total = lengths.reduce((n, l) => n + l, 0);
  const data = new Float32Array(Math.max(0, total - 1));
  let at = 0;
  rows.forEach((r, i) => {
    const len = lengths[i] as number;
    if (r.length > len - 1)
      throw new AlgorithmError(
        'SHAPE_MISMATCH',
        `row ${i} has length ${r.length}, more than its sequence's ${len} tokens predict`,
        { field: 'rows', index: i },
      );
    for (let t = 0; t < r.length; t++) data[at + t] = r[t] as number;
    at += len;
  });
  return { data, shape: [1, data.length] };
}
