import * as tf from '@tensorflow/tfjs';
import { test } from 'uvu';
import { bradleyTerryLoss, pairwiseAccuracy } from '../../algorithms/reward-model-loss.ts';
import { near, throwsCode } from './helpers.ts';

await tf.setBackend('cpu');

test('Bradley–Terry: −mean log σ(r_c − r_r) and its gradient σ(d) − 1 (hand-computed)', () => {
  // differences d = 0, 2, −1: −log σ(0) = ln 2 = 0.693147, −log σ(2) = 0.126928,
  // −log σ(−1) = 1.313262; mean 0.711112
  const c = tf.tensor1d([1, 3, 0]);
  const r = tf.tensor1d([1, 1, 1]);
  near([bradleyTerryLoss(c, r).dataSync()[0]!], [0.711112]);
  // ∂/∂r_c = (σ(d) − 1)/3: σ(0) = 0.5, σ(2) = 0.880797, σ(−1) = 0.268941
  const g = tf.grad((x: tf.Tensor) => bradleyTerryLoss(x as tf.Tensor1D, r))(c);
  near(Array.from(g.dataSync()), [-0.5 / 3, -0.119203 / 3, -0.731059 / 3]);
});

test('a margin asks the chosen score to lead by m; extreme differences stay finite', () => {
  const c = tf.tensor1d([2]);
  const r = tf.tensor1d([1]);
  near([bradleyTerryLoss(c, r, 1).dataSync()[0]!], [Math.LN2]);
  near([bradleyTerryLoss(tf.tensor1d([-200]), tf.tensor1d([0])).dataSync()[0]!], [200], 1e-3);
  throwsCode(() => bradleyTerryLoss(c, tf.tensor1d([1, 2])), 'SHAPE_MISMATCH');
});

test('pairwise accuracy counts ties as half', () => {
  near([pairwiseAccuracy([1, 0, 2, 5], [0, 1, 2, 4])], [2.5 / 4]);
  near([pairwiseAccuracy([], [])], [0]);
});

test.run();
