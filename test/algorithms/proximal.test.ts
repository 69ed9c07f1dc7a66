import { test } from 'uvu';
import { loglinearProximalLogprobs } from '../../algorithms/proximal.ts';
import { near, throwsCode } from './helpers.ts';

test('interpolates in log space by version distance (hand-computed)', () => {
  // α = (1−0)/(2−0) = 0.5; α = (1−1)/(2−1) = 0; off-mask copies current
  near(
    loglinearProximalLogprobs([-2, -3, 0], [-1, -1, -7], [0, 1, -1], [1, 1, 0], 1, 2),
    [-1.5, -3, -7],
  );
  // prox = current version → α = 1; versions after prox clamp to α = 0 (and v_behav = v_θ keeps behaviour)
  near(loglinearProximalLogprobs([-2, -4], [-1, -1], [0, 2], [1, 1], 2, 2), [-1, -4]);
});

test('single token and validation', () => {
  near(loglinearProximalLogprobs([-2], [-1], [0], [1], 1, 2), [-1.5]);
  throwsCode(
    () => loglinearProximalLogprobs([-2], [NaN], [0], [1], 1, 2),
    'NON_FINITE_INPUT',
    'currentLogprobs[0]',
  );
  throwsCode(
    () => loglinearProximalLogprobs([-2], [-1, 0], [0], [1], 1, 2),
    'SHAPE_MISMATCH',
    'currentLogprobs',
  );
});

test.run();
