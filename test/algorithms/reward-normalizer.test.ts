import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RewardNormalizer } from '../../algorithms/reward-normalizer.ts';
import { near, throwsCode } from './helpers.ts';

test('running mean/std over batches equals the statistics of all scores', () => {
  const n = new RewardNormalizer();
  n.update([1, 2, 3]);
  n.update([4, 5]);
  near([n.mean, n.std], [3, Math.SQRT2]);
  near(n.normalize([3, 5]), [0, Math.SQRT2]);
  const restored = new RewardNormalizer(n.state());
  near([restored.mean, restored.std], [3, Math.SQRT2]);
});

test('before data or with constant scores it does not divide by zero', () => {
  const n = new RewardNormalizer();
  near(n.normalize([2]), [2]);
  n.update([1, 1]);
  near(n.normalize([1, 2]), [0, 1e8]);
  n.update([]);
  throwsCode(() => n.update([NaN]), 'NON_FINITE_INPUT', 'scores[0]');
  assert.is(n.state().count, 2);
});

test.run();
