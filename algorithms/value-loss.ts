/**
 * The critic's loss in TF.js: `0.5·agg(max((V_old + clip(V − V_old, ±ε_v) − R)², (V − R)²))`, or
 * `0.5·agg((V − R)²)` without value clipping.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import { invalidOption } from './errors.ts';
import { aggregateLoss, assertFiniteTensor, type AggregationOptions } from './loss-aggregation.ts';

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

/** The clipped value loss; differentiable in `values`. */
export function valueLoss(inputs: ValueLossInputs, opts: ValueLossOptions = {}): tf.Scalar {
  const clip = opts.valueClip === undefined ? valueLossDefaults.valueClip : opts.valueClip;
  if (clip !== null && !(clip >= 0 && Number.isFinite(clip)))
    throw invalidOption('--value-clip', `must be a finite number >= 0 (got ${clip})`);
  if (opts.checkFinite ?? true) {
    assertFiniteTensor(inputs.oldValues, 'oldValues');
    assertFiniteTensor(inputs.returns, 'returns');
  }
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
    return tf.mul(aggregateLoss(perToken, inputs.mask, agg), 0.5) as tf.Scalar;
  });
}
