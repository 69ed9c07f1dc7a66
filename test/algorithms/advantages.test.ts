import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  computeAdvantages,
  discountedReturnsRow,
  gaeRow,
  resolveAdvantageOptions,
  shapeGroupScores,
  whitenAdvantages,
} from '../../algorithms/advantages.ts';
import { near, throwsCode } from './helpers.ts';

const s2 = Math.SQRT1_2;

test('GAE with γ = λ = 1 telescopes to reward-to-go minus value', () => {
  const { advantages, returns } = gaeRow([0, 0, 1], [0.5, 0.6, 0.7], [1, 1, 1], 1, 1);
  near(advantages, [0.5, 0.4, 0.3]);
  near(returns, [1, 1, 1]);
});

test('GAE with γ = 0.9, λ = 0.8 (hand-computed)', () => {
  const { advantages, returns } = gaeRow([0, 0, 1], [0.5, 0.6, 0.7], [1, 1, 1], 0.9, 0.8);
  near(advantages, [0.21712, 0.246, 0.3]);
  near(returns, [0.71712, 0.846, 1.0]);
});

test('GAE multiplies values and rewards by the mask', () => {
  const { advantages } = gaeRow([5, 0, 1], [9, 0.6, 0.7], [0, 1, 1], 1, 1);
  near(advantages, [1.0, 0.4, 0.3]);
});

test('discounted returns', () => {
  near(discountedReturnsRow([1, 0, 2], [1, 1, 1], 0.5), [1.5, 1, 2]);
  near(discountedReturnsRow([1, 7, 2], [1, 0, 1], 1), [3, 2, 2]);
  near(discountedReturnsRow([], [], 1), []);
});

test('group shaping: rloo, reinforce_baseline, group_norm, dr_grpo', () => {
  const g = ['a', 'a', 'a', 'a'];
  near(shapeGroupScores([1, 0, 0, 0], g, 'rloo'), [1, -1 / 3, -1 / 3, -1 / 3]);
  near(shapeGroupScores([1, 0, 0, 0], g, 'reinforce_baseline'), [0.75, -0.25, -0.25, -0.25]);
  near(shapeGroupScores([1, 0, 0, 0], g, 'dr_grpo'), [0.75, -0.25, -0.25, -0.25]);
  // unbiased std of [1,0,0,0] = sqrt(0.75/3) = 0.5
  near(shapeGroupScores([1, 0, 0, 0], g, 'group_norm'), [1.5, -0.5, -0.5, -0.5]);
  near(shapeGroupScores([1, 0], ['x', 'x'], 'group_norm'), [s2, -s2]);
  near(shapeGroupScores([1, 0], ['x', 'x'], 'group_norm', true), [0.5, -0.5]);
  near(shapeGroupScores([3, 1], ['x', 'x'], 'gae'), [3, 1]);
});

test('all-equal group rewards give zero advantage, never NaN', () => {
  for (const est of ['rloo', 'group_norm', 'dr_grpo', 'reinforce_baseline'] as const) {
    near(shapeGroupScores([1, 1, 1], ['a', 'a', 'a'], est), [0, 0, 0]);
  }
});

test('groups are formed by id, interleaved, and a singleton keeps its score', () => {
  near(
    shapeGroupScores([1, 10, 3, 20, 5], ['a', 'b', 'a', 'b', 'c'], 'dr_grpo'),
    [-1, -5, 1, 5, 5],
  );
});

test('whitening uses the masked mean and population variance over the batch', () => {
  const r = 1 / Math.sqrt(2 / 3);
  const out = whitenAdvantages([[1, 2, 99], [3]], [[1, 1, 0], [1]]);
  near(out[0]!, [-r, 0, 0]);
  near(out[1]!, [r]);
  const ns = whitenAdvantages([[1, 2], [3]], [[1, 1], [1]], true);
  near(ns[0]!, [-1, 0]);
  near(ns[1]!, [1]);
});

test('whitening an all-equal or fully masked batch gives zeros', () => {
  near(whitenAdvantages([[2, 2], [2]], [[1, 1], [1]])[0]!, [0, 0]);
  near(whitenAdvantages([[2, 2]], [[0, 0]])[0]!, [0, 0]);
});

test('reinforce: A = G, then global whitening', () => {
  const { advantages, returns } = computeAdvantages(
    {
      tokenRewards: [
        [0, 1],
        [0, 3],
      ],
      masks: [
        [1, 1],
        [1, 1],
      ],
    },
    { estimator: 'reinforce' },
  );
  near(returns[0]!, [1, 1]);
  near(returns[1]!, [3, 3]);
  near(advantages[0]!, [-1, -1]);
  near(advantages[1]!, [1, 1]);
});

test('rloo / group_norm: A = G with γ forced to 1 and no whitening; zero outside the mask', () => {
  const { advantages } = computeAdvantages(
    {
      tokenRewards: [
        [0, 0.5, 0.5],
        [2, 0, 0],
      ],
      masks: [
        [0, 1, 1],
        [0, 0, 0],
      ],
    },
    { estimator: 'rloo', gamma: 0.5, nSamplesPerPrompt: 2 },
  );
  near(advantages[0]!, [0, 1, 0.5]);
  near(advantages[1]!, [0, 0, 0]);
});

test('gae end to end: whitened advantages and unwhitened returns', () => {
  const { advantages, returns } = computeAdvantages(
    { tokenRewards: [[0, 0, 1]], masks: [[1, 1, 1]], values: [[0.5, 0.6, 0.7]] },
    { estimator: 'gae' },
  );
  near(returns[0]!, [1, 1, 1]);
  const std = Math.sqrt((0.1 ** 2 + 0 + 0.1 ** 2) / 3);
  near(advantages[0]!, [0.1 / std, 0, -0.1 / std], 1e-4);
});

test('single-token responses', () => {
  const { advantages } = computeAdvantages(
    { tokenRewards: [[1], [0]], masks: [[1], [1]] },
    { estimator: 'group_norm', nSamplesPerPrompt: 2 },
  );
  near(advantages[0]!, [1]);
  near(advantages[1]!, [0]);
});

test('validation names the flag', () => {
  for (const est of ['rloo', 'reinforce_baseline', 'group_norm', 'dr_grpo'] as const) {
    throwsCode(
      () => resolveAdvantageOptions({ estimator: est }),
      'INVALID_OPTION',
      '--n-samples-per-prompt',
    );
  }
  throwsCode(
    () => resolveAdvantageOptions({ estimator: 'ppo' as 'gae' }),
    'INVALID_OPTION',
    '--advantage-estimator',
  );
  throwsCode(() => resolveAdvantageOptions({ gamma: 1.5 }), 'INVALID_OPTION', '--gamma');
  throwsCode(() => resolveAdvantageOptions({ lambd: -1 }), 'INVALID_OPTION', '--lambd');
  assert.is(
    resolveAdvantageOptions({ estimator: 'rloo', gamma: 0.5, nSamplesPerPrompt: 4 }).gamma,
    1,
  );
  assert.is(resolveAdvantageOptions({ estimator: 'reinforce', gamma: 0.5 }).gamma, 0.5);
  throwsCode(
    () => computeAdvantages({ tokenRewards: [[1]], masks: [[1]] }, { estimator: 'gae' }),
    'SHAPE_MISMATCH',
    'values',
  );
});

test('NaN and Inf inputs are rejected', () => {
  throwsCode(
    () => computeAdvantages({ tokenRewards: [[NaN]], masks: [[1]] }, { estimator: 'reinforce' }),
    'NON_FINITE_INPUT',
    'tokenRewards[0]',
  );
  throwsCode(
    () =>
      computeAdvantages(
        { tokenRewards: [[1]], masks: [[1]], values: [[Infinity]] },
        { estimator: 'gae' },
      ),
    'NON_FINITE_INPUT',
    'values[0]',
  );
  throwsCode(() => shapeGroupScores([1, NaN], ['a', 'a'], 'rloo'), 'NON_FINITE_INPUT', 'scores[1]');
});

test.run();
