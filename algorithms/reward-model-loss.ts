/**
 * The pairwise Bradley–Terry loss a reward model trains on: for a prompt with a chosen and a
 * rejected response scored r_c and r_r, P(chosen ≻ rejected) = σ(r_c − r_r), and the loss is
 * −log σ(r_c − r_r − m) averaged over pairs (OpenRLHF's `PairWiseLoss`; the margin m is its
 * `margin`, 0 by default). `log σ(x)` is computed as `−softplus(−x)`, finite for any x.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import { AlgorithmError } from './errors.ts';

/**
 * Mean Bradley–Terry loss of `chosen` over `rejected` scores (both `[N]`), differentiable in both.
 *
 * @example
 * const loss = bradleyTerryLoss(scores(chosenIds), scores(rejectedIds));
 */
export function bradleyTerryLoss(
  chosen: tf.Tensor1D,
  rejected: tf.Tensor1D,
  margin: number | tf.Tensor1D = 0,
): tf.Scalar {
  if (chosen.shape[0] !== rejected.shape[0]) {
    throw new AlgorithmError(
      'SHAPE_MISMATCH',
      `chosen has ${chosen.shape[0]} scores, rejected ${rejected.shape[0]}`,
      { field: 'rejected' },
    );
  }
  return tf.tidy(() => tf.mean(tf.softplus(tf.neg(tf.sub(tf.sub(chosen, rejected), margin)))));
}

/** Share of pairs whose chosen response scores above the rejected one (ties count half). */
export function pairwiseAccuracy(chosen: ArrayLike<number>, rejected: ArrayLike<number>): number {
  if (chosen.length === 0) return 0;
  let right = 0;
  for (let i = 0; i < chosen.length; i++) {
    const d = (chosen[i] as number) - (rejected[i] as number);
    right += d > 0 ? 1 : d === 0 ? 0.5 : 0;
  }
  return right / chosen.length;
}
