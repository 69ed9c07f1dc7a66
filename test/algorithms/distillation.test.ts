import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { distillAdvantages, resolveDistillOptions } from '../../algorithms/distillation.ts';
import { near, throwsCode } from './helpers.ts';

// Two samples; row 0 has a prompt position (mask 0) whose logprobs must not count.
const masks = [
  [0, 1, 1],
  [1, 1, 0],
];
const task = [
  [9, 0.5, 0.5],
  [-1, -1, 7],
];
const student = [
  [-5, -1, -2],
  [-0.5, -3, -9],
];
const teacher = [
  [0, -0.5, -2.5],
  [-0.5, -1, 0],
];

test('advantage = task advantage + (log π_T − log π_S) per action token (hand-computed)', () => {
  const { advantages, reverseKl } = distillAdvantages(task, masks, student, teacher);
  // row 0: 0.5 + (−0.5 + 1), 0.5 + (−2.5 + 2); row 1: −1 + 0, −1 + (−1 + 3)
  near(advantages[0]!, [0, 1, 0]);
  near(advantages[1]!, [-1, 1, 0]);
  // reverse KL log π_S − log π_T over the 4 action tokens: −0.5, 0.5, 0, −2
  near([reverseKl], [-2 / 4]);
});

test('weights: the teacher alone (task 0) and a scaled teacher term', () => {
  const alone = distillAdvantages(task, masks, student, teacher, { taskRewardCoef: 0 });
  near(alone.advantages[0]!, [0, 0.5, -0.5]);
  near(alone.advantages[1]!, [0, 2, 0]);
  const half = distillAdvantages(task, masks, student, teacher, { teacherKlCoef: 0.5 });
  near(half.advantages[0]!, [0, 0.75, 0.25]);
  near([half.reverseKl], [-0.5]);
});

test('bad input: rows of the wrong length, non-finite logprobs, negative weights', () => {
  throwsCode(
    () => distillAdvantages(task, masks, student, [[0, 0, 0], [0]]),
    'SHAPE_MISMATCH',
    'row 1',
  );
  throwsCode(
    () =>
      distillAdvantages(task, masks, student, [
        [0, -Infinity, 0],
        [0, 0, 0],
      ]),
    'NON_FINITE_INPUT',
  );
  throwsCode(
    () => resolveDistillOptions({ teacherKlCoef: -1 }),
    'INVALID_OPTION',
    '--teacher-kl-coef',
  );
  assert.equal(resolveDistillOptions(), { teacherKlCoef: 1, taskRewardCoef: 1 });
});

test.run();
