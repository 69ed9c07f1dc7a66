import * as tf from '@tensorflow/tfjs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { policyLossStats, ppoActorLoss } from '../../algorithms/policy-loss.ts';
import {
  resolveRolloutCorrection,
  rolloutCorrectionStats,
  type IsCorrection,
} from '../../algorithms/rollout-correction.ts';
import { near, throwsCode } from './helpers.ts';

await tf.setBackend('cpu');

// Three sequences; the trainer's old logprobs are 0, so ρ_t = π_old/π_behav = exp(−behav).
// row 0: ρ = 2, 2 (its third token, ρ = 100, is masked out); Π = 4, geometric mean 2
// row 1: ρ = 0.9, 1;                                         Π = 0.9, geometric mean 0.948683
// row 2: ρ = 1, 1, 1;                                        Π = 1, geometric mean 1
const mask = [
  [1, 1, 0],
  [1, 1, 0],
  [1, 1, 1],
];
const behav = [
  [-Math.log(2), -Math.log(2), -Math.log(100)],
  [-Math.log(0.9), 0, 0],
  [0, 0, 0],
];
const old = mask.map((r) => r.map(() => 0));

/** PPO at r = 1 with A = 1: each token's loss is −weight, so token-mean loss = −mean(weights). */
function meanWeight(isCorrection: IsCorrection, extra: object = {}): number {
  const z = tf.tensor2d(old);
  const loss = ppoActorLoss(
    {
      logprobs: z,
      oldLogprobs: z,
      advantages: tf.onesLike(z),
      mask: tf.tensor2d(mask),
      behaviourLogprobs: tf.tensor2d(behav),
    },
    { isCorrection, ...extra },
  );
  return -loss.dataSync()[0]!;
}

test('each preset weighs the constructed batch as worked out by hand', () => {
  // tis clamps each token to [0.5, 5]; icepop keeps tokens inside it (the masked 100 is ignored).
  near([meanWeight('tis')], [(2 + 2 + 0.9 + 1 + 3) / 7]);
  near([meanWeight('icepop')], [(2 + 2 + 0.9 + 1 + 3) / 7]);
  near([meanWeight('tis', { isThreshold: [0.95, 1.5] })], [(1.5 + 1.5 + 0.95 + 1 + 3) / 7]);
  near([meanWeight('icepop', { isThreshold: [0.95, 1.5] })], [(0 + 0 + 0 + 1 + 3) / 7]);
  // seq-tis: Π clamped to [0.5, 2] on every token of its sequence: 2, 2 | 0.9, 0.9 | 1, 1, 1
  near([meanWeight('seq-tis')], [(2 + 2 + 0.9 + 0.9 + 3) / 7]);
  // seq-mis: a sequence outside [0.5, 2] is rejected (row 0), the others keep Π
  near([meanWeight('seq-mis')], [(0 + 0 + 0.9 + 0.9 + 3) / 7]);
  // geo-rs: only sequences whose geometric mean is within [0.999, 1.001] remain
  near([meanWeight('geo-rs')], [3 / 7]);
  near([meanWeight('geo-rs', { isSeqThreshold: [0.9, 1.1] })], [5 / 7]);
  near([meanWeight('none')], [1]);
});

test('diagnostics: ratio quantiles, shares outside the band, rejected counts', () => {
  const samples = mask.map((m, k) => ({ actionMask: m, behaviourLogprobs: behav[k]! }));
  const s = rolloutCorrectionStats(samples, old, { isCorrection: 'seq-mis' });
  // action-token ratios, sorted: 0.9, 1, 1, 1, 1, 2, 2
  near(
    [s.is_ratio_min!, s.is_ratio_p05!, s.is_ratio_p50!, s.is_ratio_p95!, s.is_ratio_max!],
    [0.9, 0.93, 1, 2, 2],
  );
  near([s.is_ratio_mean!], [8.9 / 7]);
  near([s.logprob_gap!], [(2 * Math.log(2) - Math.log(0.9)) / 7]);
  near([s.is_token_outside!, s.is_seq_outside!, s.is_weight_mean!], [0, 1 / 3, 4.8 / 7]);
  assert.equal([s.is_rejected_tokens, s.is_rejected_seqs], [2, 1]);
  const g = rolloutCorrectionStats(samples, old, { isCorrection: 'geo-rs' });
  near([g.is_seq_outside!], [2 / 3]);
  assert.equal([g.is_rejected_tokens, g.is_rejected_seqs], [4, 2]);
  // token presets: a sequence is outside when any of its tokens is
  const t = rolloutCorrectionStats(samples, old, { isCorrection: 'tis', isThreshold: [0.95, 1.5] });
  near([t.is_token_outside!, t.is_seq_outside!], [3 / 7, 2 / 3]);
  assert.equal([t.is_rejected_tokens, t.is_rejected_seqs], [0, 0]);
  assert.equal(rolloutCorrectionStats([], []), {});
});

test('diagnostics over rows of different lengths count generated tokens only', () => {
  const m = rolloutCorrectionStats(
    [
      { actionMask: [0, 1, 1], behaviourLogprobs: [9, -1, -2] },
      { actionMask: [1, 0], behaviourLogprobs: [-1, 5] },
    ],
    [
      [0, -1.5, -2],
      [-0.5, 0],
    ],
  );
  near([m.logprob_gap!], [1 / 3], 1e-12);
  near([m.is_ratio_min!, m.is_ratio_max!], [Math.exp(-0.5), Math.exp(0.5)], 1e-12);
  near([m.is_ratio_mean!], [(Math.exp(-0.5) + 1 + Math.exp(0.5)) / 3], 1e-12);
  near([m.is_weight_mean!], [1]);
  assert.equal([m.is_rejected_tokens, m.is_rejected_seqs], [0, 0]);
});

test('the diagnostics and the loss agree on which tokens were rejected', () => {
  const samples = mask.map((m, k) => ({ actionMask: m, behaviourLogprobs: behav[k]! }));
  for (const isCorrection of ['icepop', 'seq-mis', 'geo-rs'] as const) {
    const z = tf.tensor2d(old);
    const loss = policyLossStats(
      {
        logprobs: z,
        oldLogprobs: z,
        advantages: tf.onesLike(z),
        mask: tf.tensor2d(mask),
        behaviourLogprobs: tf.tensor2d(behav),
      },
      { isCorrection, isThreshold: [0.95, 1.5] },
    );
    const s = rolloutCorrectionStats(samples, old, { isCorrection, isThreshold: [0.95, 1.5] });
    near([loss.behaviourWeightZeroFraction], [s.is_rejected_tokens! / 7], 1e-6);
    near([loss.behaviourWeightMean], [s.is_weight_mean!], 1e-6);
  }
});

test('options: preset defaults for the sequence band; errors name the flag', () => {
  assert.equal(resolveRolloutCorrection({ isCorrection: 'geo-rs' }).isSeqThreshold, [0.999, 1.001]);
  assert.equal(resolveRolloutCorrection({ isCorrection: 'seq-mis' }).isSeqThreshold, [0.5, 2]);
  assert.equal(
    resolveRolloutCorrection({ isCorrection: 'seq-tis', isSeqThreshold: [0.2, 3] }).isSeqThreshold,
    [0.2, 3],
  );
  throwsCode(
    () => resolveRolloutCorrection({ isCorrection: 'seq-is' as IsCorrection }),
    'INVALID_OPTION',
    '--is-correction',
  );
  throwsCode(
    () => resolveRolloutCorrection({ isSeqThreshold: [2, 1] }),
    'INVALID_OPTION',
    '--is-seq-threshold',
  );
});

test.run();
