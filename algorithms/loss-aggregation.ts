/**
 * How per-token losses become one scalar: token-level mean, sequence mean of token means, or the
 * Dr.GRPO constant normaliser. With `weights` from `packing.ts` a micro-batch's loss is its exact
 * share of the whole batch's loss, so summing micro-batch gradients equals the full-batch gradient.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import { AlgorithmError, invalidOption } from './errors.ts';

/**
 * `token-mean`: Σ l·m / Σ m over the batch (OpenRLHF, AReaL, DAPO).
 * `seq-mean-token-mean`: mean over sequences with at least one action token of each one's token mean.
 * `seq-mean-token-sum-norm`: Σ_i Σ_t l·m / (B · C), Dr.GRPO's constant normaliser C.
 */
export type LossAggregation = 'token-mean' | 'seq-mean-token-mean' | 'seq-mean-token-sum-norm';

/** Every aggregation name, for CLI choices. */
export const LOSS_AGGREGATIONS: readonly LossAggregation[] = [
  'token-mean',
  'seq-mean-token-mean',
  'seq-mean-token-sum-norm',
];

/** Aggregation options. */
export interface AggregationOptions {
  /** How tokens are averaged (`--loss-agg-mode`). @default 'token-mean' */
  lossAggMode?: LossAggregation;
  /** C for `seq-mean-token-sum-norm`, usually the generation limit (`--generate-max-len`). */
  lossNormConstant?: number;
}

/** Checks an aggregation choice; the constant is required for the Dr.GRPO mode. */
export function checkAggregation(opts: AggregationOptions): void {
  const agg = opts.lossAggMode ?? 'token-mean';
  if (!LOSS_AGGREGATIONS.includes(agg)) {
    throw invalidOption(
      '--loss-agg-mode',
      `must be one of ${LOSS_AGGREGATIONS.join(', ')} (got ${String(agg)})`,
    );
  }
  if (
    agg === 'seq-mean-token-sum-norm' &&
    !(opts.lossNormConstant !== undefined && opts.lossNormConstant > 0)
  ) {
    throw invalidOption(
      '--loss-agg-mode',
      `seq-mean-token-sum-norm needs a lossNormConstant > 0 (got ${opts.lossNormConstant})`,
    );
  }
}

/**
 * Reduces a per-token loss `[B, T]` (or `[T]`, one sequence) under `mask` to a scalar. When
 * `weights` is given (same shape, 0 off the mask) the result is `Σ l·w` and `aggregation` is not
 * used. A batch without action tokens gives 0, not NaN.
 */
export function aggregateLoss(
  perToken: tf.Tensor,
  mask: tf.Tensor,
  opts: AggregationOptions & { weights?: tf.Tensor } = {},
): tf.Scalar {
  if (!sameShape(perToken.shape, mask.shape)) {
    throw new AlgorithmError(
      'SHAPE_MISMATCH',
      `mask shape [${mask.shape}] != loss shape [${perToken.shape}]`,
      { field: 'mask' },
    );
  }
  return tf.tidy(() => {
    if (opts.weights) {
      if (!sameShape(perToken.shape, opts.weights.shape)) {
        throw new AlgorithmError(
          'SHAPE_MISMATCH',
          `weights shape [${opts.weights.shape}] != loss shape [${perToken.shape}]`,
          {
            field: 'weights',
          },
        );
      }
      return tf.sum(tf.mul(tf.mul(perToken, opts.weights), mask)) as tf.Scalar;
    }
    checkAggregation(opts);
    const l = perToken.rank === 1 ? perToken.expandDims(0) : perToken;
    const m = mask.rank === 1 ? mask.expandDims(0) : mask;
    const lm = tf.mul(l, m);
    const agg = opts.lossAggMode ?? 'token-mean';
    if (agg === 'token-mean') return tf.div(tf.sum(lm), tf.maximum(tf.sum(m), 1)) as tf.Scalar;
    const rowSum = tf.sum(lm, -1);
    if (agg === 'seq-mean-token-sum-norm') {
      return tf.div(
        tf.sum(rowSum),
        (l.shape[0] as number) * (opts.lossNormConstant as number),
      ) as tf.Scalar;
    }
    const rowCount = tf.sum(m, -1);
    const hasTokens = tf.cast(tf.greater(rowCount, 0), 'float32');
    const rowMean = tf.div(rowSum, tf.maximum(rowCount, 1));
    return tf.div(
      tf.sum(tf.mul(rowMean, hasTokens)),
      tf.maximum(tf.sum(hasTokens), 1),
    ) as tf.Scalar;
  });
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** Throws `NON_FINITE_INPUT` naming `field` if the tensor holds NaN or ±Inf (one device sync). */
export function assertFiniteTensor(t: tf.Tensor, field: string): void {
  const ok = tf.tidy(() => tf.all(tf.isFinite(t)).dataSync()[0]);
  if (!ok) {
    throw new AlgorithmError(
      'NON_FINITE_INPUT',
      `${field} holds NaN or Infinity; every value must be finite`,
      { field },
    );
  }
}
