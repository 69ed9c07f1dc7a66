/**
 * The critic's loss in TF.js: `0.5·agg(max((V_old + clip(V − V_old, ±ε_v) − R)², (V − R)²))`, or
 * `0.5·agg((V − R)²)` without value clipping, with its input checks read back beside the loss.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import { AlgorithmError, invalidOption } from './errors.ts';
import { aggregateLoss, type AggregationOptions } from './loss-aggregation.ts';

/** Options of {@link valueLoss}. */
export interface ValueLossOptions extends AggregationOptions {
  /** Value clip range ε_v (`--value-clip`); null disables clipping. @default 0.5 */
  valueClip?: number | null;
  /** Check returns/old values for NaN/Inf. @default true */
  checkFinite?: boolean;
}

/** Defaults for {@link ValueLossOptions}. */
export const valueLossDefaults = {
  valueClip: 0.5 as number | null,
  lossAggMode: 'token-mean' as const,
  checkFinite: true,
};

/** Tensors for {@link valueLoss}; one shape. */
export interface ValueLossInputs {
  /** Current critic values (differentiable). */
  values: tf.Tensor;
  /** Values at make-experience time. */
  oldValues: tf.Tensor;
  returns: tf.Tensor;
  mask: tf.Tensor;
  /** Per-token loss weights from packing; replaces local aggregation. */
  weights?: tf.Tensor;
}

/** {@link valueLoss}'s result: the loss and its input checks, to read back in one sync. */
export interface ValueLossEvaluation {
  /** Differentiable in `values`. */
  loss: tf.Scalar;
  /**
   * One value per checked input (`oldValues`, `returns`), NaN where that input holds NaN or
   * Infinity (0 without `checkFinite`): read it with {@link readValueLossChecks} in the same sync
   * as the loss.
   */
  checks: tf.Tensor1D;
}

/** Inputs whose NaN/Inf `checkFinite` refuses, in the order of their values in `checks`. */
const finiteChecked = ['oldValues', 'returns'] as const;

/**
 * The clipped value loss, with its finiteness checks as values instead of a device sync each (a
 * backend that keeps tensors on a GPU cannot read them synchronously; elsewhere it saves the
 * round trips).
 *
 * @example
 * const { loss, checks } = valueLoss(inputs, { valueClip: 0.5 });
 * readValueLossChecks(await checks.data()); // throws on non-finite inputs
 */
export function valueLoss(
  inputs: ValueLossInputs,
  opts: ValueLossOptions = {},
): ValueLossEvaluation {
  const clip = opts.valueClip === undefined ? valueLossDefaults.valueClip : opts.valueClip;
  if (clip !== null && !(clip >= 0 && Number.isFinite(clip)))
    throw invalidOption('--value-clip', `must be a finite number >= 0 (got ${clip})`);
  const check = opts.checkFinite ?? valueLossDefaults.checkFinite;
  return tf.tidy(() => {
    const { values, oldValues, returns } = inputs;
    let perToken = tf.square(tf.sub(values, returns));
    if (clip !== null) {
      const clipped = tf.add(oldValues, tf.clipByValue(tf.sub(values, oldValues), -clip, clip));
      perToken = tf.maximum(tf.square(tf.sub(clipped, returns)), perToken);
    }
    const agg: AggregationOptions & { weights?: tf.Tensor } = {
      lossAggMode: opts.lossAggMode ?? 'token-mean',
    };
    if (opts.lossNormConstant !== undefined) agg.lossNormConstant = opts.lossNormConstant;
    if (inputs.weights) agg.weights = inputs.weights;
    const loss = tf.mul(aggregateLoss(perToken, inputs.mask, agg), 0.5) as tf.Scalar;
    // Σ t·0 is 0 when every value is finite and NaN otherwise.
    const checks = tf.stack(
      finiteChecked.map((f) => (check ? tf.sum(tf.mul(inputs[f], 0)) : tf.scalar(0))),
    ) as tf.Tensor1D;
    return { loss, checks };
  });
}

/**
 * Throws `NON_FINITE_INPUT` naming the first input that held NaN or Infinity, from the `checks`
 * of {@link valueLoss} read back.
 */
export function readValueLossChecks(checks: ArrayLike<number>): void {
  finiteChecked.forEach((field, i) => {
    if (!Number.isFinite(checks[i] ?? 0)) {
      throw new AlgorithmError(
        'NON_FINITE_INPUT',
        `${field} holds NaN or Infinity; every value must be finite`,
        { field },
      );
    }
  });
}
