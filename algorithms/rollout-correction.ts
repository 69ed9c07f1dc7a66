/**
 * Rollout correction of the train–inference mismatch (`--is-correction`): a constant per-token
 * weight on the policy loss from the ratio of the trainer's old logprobs to the engine's
 * behaviour logprobs, ρ_t = π_old/π_behav. Token-level presets (OpenRLHF's `tis`, `icepop`)
 * weigh each token by its own ratio; sequence-level presets (verl's `rollout_corr`: Seq-TIS,
 * Seq-MIS, Geo-RS) by one number per sequence. One function, {@link rolloutCorrection}, decides
 * the weights; the loss multiplies by them and {@link rolloutCorrectionStats} describes them.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import { invalidOption } from './errors.ts';
import { padRows } from './packing.ts';

/** Rollout-correction presets (`--is-correction`). */
export const IS_CORRECTIONS = ['none', 'tis', 'icepop', 'seq-tis', 'seq-mis', 'geo-rs'] as const;
export type IsCorrection = (typeof IS_CORRECTIONS)[number];

/** Defaults of {@link RolloutCorrectionOptions} (the sequence band is the preset's). */
export const rolloutCorrectionDefaults = {
  isCorrection: 'none' as IsCorrection,
  isThreshold: [0.5, 5] as readonly [number, number],
};

/** Presets that weigh a whole sequence by one number, and their default `--is-seq-threshold`. */
const seqThresholdDefaults: Partial<Record<IsCorrection, readonly [number, number]>> = {
  'seq-tis': [0.5, 2],
  'seq-mis': [0.5, 2],
  'geo-rs': [0.999, 1.001],
};

/** Options of the correction (the fields of `PpoLossOptions` it reads). */
export interface RolloutCorrectionOptions {
  /** The preset. @default 'none' */
  isCorrection?: IsCorrection;
  /** [lo, hi] of the token ratio (`tis`, `icepop`; `--is-threshold`). @default [0.5, 5] */
  isThreshold?: readonly [number, number];
  /**
   * [lo, hi] of the sequence statistic (`seq-tis`, `seq-mis`: Π_t ρ_t; `geo-rs`: its geometric
   * mean; `--is-seq-threshold`). @default [0.5, 2] for seq-tis and seq-mis, [0.999, 1.001] for geo-rs
   */
  isSeqThreshold?: readonly [number, number];
}

/** {@link RolloutCorrectionOptions} resolved. */
export interface ResolvedRolloutCorrection {
  isCorrection: IsCorrection;
  isThreshold: readonly [number, number];
  isSeqThreshold: readonly [number, number];
}

/** Fills the preset's defaults and validates; errors name the flag. */
export function resolveRolloutCorrection(o: RolloutCorrectionOptions): ResolvedRolloutCorrection {
  const isCorrection = o.isCorrection ?? rolloutCorrectionDefaults.isCorrection;
  if (!IS_CORRECTIONS.includes(isCorrection)) {
    throw invalidOption(
      '--is-correction',
      `must be one of ${IS_CORRECTIONS.join(', ')} (got ${String(isCorrection)})`,
    );
  }
  const isThreshold = o.isThreshold ?? rolloutCorrectionDefaults.isThreshold;
  const isSeqThreshold = o.isSeqThreshold ?? seqThresholdDefaults[isCorrection] ?? [0.5, 2];
  for (const [flag, [lo, hi]] of [
    ['--is-threshold', isThreshold],
    ['--is-seq-threshold', isSeqThreshold],
  ] as const) {
    if (!(lo > 0 && lo <= hi && Number.isFinite(hi)))
      throw invalidOption(flag, `needs 0 < low <= high (got ${lo}, ${hi})`);
  }
  return { isCorrection, isThreshold, isSeqThreshold };
}

/** The log ratio is bounded before `exp` (verl's safety bound), per token and per sequence. */
const LOG_BOUND = 20;

const inBand = (x: tf.Tensor, [lo, hi]: readonly [number, number]): tf.Tensor =>
  tf.logicalAnd(tf.greaterEqual(x, lo), tf.lessEqual(x, hi));

/**
 * The per-token correction weight (shape of `mask`, `[B, T]` or `[T]`; a row is one sequence),
 * and for sequence presets the sequence statistic `[B, 1]`. Not differentiable: the inputs are
 * constants of the batch.
 *
 * - `tis`: clamp(ρ_t, lo, hi). `icepop`: ρ_t inside [lo, hi], else 0.
 * - `seq-tis`: clamp(Π_t ρ_t, lo_s, hi_s) on every token of the sequence.
 * - `seq-mis`: Π_t ρ_t if inside [lo_s, hi_s], else 0 (the sequence is rejected).
 * - `geo-rs`: 1 if the geometric mean exp(mean_t log ρ_t) is inside [lo_s, hi_s], else 0.
 * - `none`: 1.
 */
export function rolloutCorrection(
  oldLogprobs: tf.Tensor,
  behaviourLogprobs: tf.Tensor,
  mask: tf.Tensor,
  o: ResolvedRolloutCorrection,
): { weights: tf.Tensor; seqStat?: tf.Tensor } {
  return tf.tidy(() => {
    const logR = tf.clipByValue(tf.sub(oldLogprobs, behaviourLogprobs), -LOG_BOUND, LOG_BOUND);
    const rho = tf.exp(logR);
    const zero = tf.zerosLike(rho);
    const [lo, hi] = o.isThreshold;
    switch (o.isCorrection) {
      case 'none':
        return { weights: tf.onesLike(rho) };
      case 'tis':
        return { weights: tf.clipByValue(rho, lo, hi) };
      case 'icepop':
        return { weights: tf.where(inBand(rho, o.isThreshold), rho, zero) };
    }
    const sumLog = tf.sum(tf.mul(logR, mask), -1, true);
    const broadcast = (x: tf.Tensor): tf.Tensor => tf.mul(x, tf.onesLike(rho));
    if (o.isCorrection === 'geo-rs') {
      const geo = tf.exp(tf.div(sumLog, tf.maximum(tf.sum(mask, -1, true), 1)));
      return {
        weights: broadcast(tf.cast(inBand(geo, o.isSeqThreshold), 'float32')),
        seqStat: geo,
      };
    }
    const seq = tf.exp(tf.clipByValue(sumLog, -LOG_BOUND, LOG_BOUND));
    const [slo, shi] = o.isSeqThreshold;
    const w =
      o.isCorrection === 'seq-tis'
        ? tf.clipByValue(seq, slo, shi)
        : tf.where(inBand(seq, o.isSeqThreshold), seq, tf.zerosLike(seq));
    return { weights: broadcast(w), seqStat: seq };
  });
}

/** Linear-interpolation quantile of sorted values (numpy's default). */
function quantile(sorted: Float64Array, q: number): number {
  const pos = (sorted.length - 1) * q;
  const i = Math.floor(pos);
  const next = sorted[Math.min(i + 1, sorted.length - 1)]!;
  return sorted[i]! + (next - sorted[i]!) * (pos - i);
}

/**
 * Diagnostics of the mismatch and of what `o`'s correction does with it, over action tokens:
 * `logprob_gap` (mean |logπ_old − logπ_behav|), `is_ratio_{mean,min,max,p05,p50,p95}` of the
 * token ratio ρ_t, `is_token_outside` (share of tokens with ρ_t outside `--is-threshold`),
 * `is_seq_outside` (share of sequences outside the band: their statistic outside
 * `--is-seq-threshold` for sequence presets, else any token outside `--is-threshold`),
 * `is_weight_mean`, and `is_rejected_tokens` / `is_rejected_seqs` (counts given weight 0; a
 * sequence counts when all its action tokens are). Empty when there are no action tokens.
 *
 * @example
 * rolloutCorrectionStats(samples, trainerLogprobs, { isCorrection: 'seq-mis' })
 */
export function rolloutCorrectionStats(
  samples: readonly { actionMask: ArrayLike<number>; behaviourLogprobs: ArrayLike<number> }[],
  trainer: readonly ArrayLike<number>[],
  opts: RolloutCorrectionOptions = {},
): Record<string, number> {
  const o = resolveRolloutCorrection(opts);
  const width = samples.reduce((m, s) => Math.max(m, s.actionMask.length), 0);
  if (width === 0) return {};
  const pad = (rows: readonly ArrayLike<number>[]) => {
    const p = padRows(rows, width);
    return tf.tensor2d(p.data, p.shape);
  };
  const [w, seqStat] = tf.tidy(() => {
    const mask = pad(samples.map((s) => s.actionMask));
    const r = rolloutCorrection(
      pad(trainer),
      pad(samples.map((s) => s.behaviourLogprobs)),
      mask,
      o,
    );
    return [r.weights.dataSync(), r.seqStat?.dataSync()];
  });
  const ratios: number[] = [];
  let gap = 0;
  let wSum = 0;
  let tokOut = 0;
  let rejTok = 0;
  let seqs = 0;
  let seqOut = 0;
  let rejSeq = 0;
  const [lo, hi] = o.isThreshold;
  const [slo, shi] = o.isSeqThreshold;
  samples.forEach((s, k) => {
    let n = 0;
    let out = 0;
    let zero = 0;
    for (let i = 0; i < s.actionMask.length; i++) {
      if (!s.actionMask[i]) continue;
      const d = (trainer[k]![i] as number) - (s.behaviourLogprobs[i] as number);
      const rho = Math.exp(d);
      const wt = w[k * width + i] as number;
      ratios.push(rho);
      gap += Math.abs(d);
      wSum += wt;
      n++;
      if (rho < lo || rho > hi) out++;
      if (wt === 0) zero++;
    }
    if (n === 0) return;
    seqs++;
    tokOut += out;
    rejTok += zero;
    if (zero === n) rejSeq++;
    const stat = seqStat?.[k];
    if (stat !== undefined ? stat < slo || stat > shi : out > 0) seqOut++;
  });
  const n = ratios.length;
  if (n === 0) return {};
  const sorted = Float64Array.from(ratios).sort();
  return {
    logprob_gap: gap / n,
    is_ratio_mean: ratios.reduce((a, b) => a + b, 0) / n,
    is_ratio_min: sorted[0]!,
    is_ratio_max: sorted[n - 1]!,
    is_ratio_p05: quantile(sorted, 0.05),
    is_ratio_p50: quantile(sorted, 0.5),
    is_ratio_p95: quantile(sorted, 0.95),
    is_token_outside: tokOut / n,
    is_seq_outside: seqOut / seqs,
    is_weight_mean: wSum / n,
    is_rejected_tokens: rejTok,
    is_rejected_seqs: rejSeq,
  };
}
