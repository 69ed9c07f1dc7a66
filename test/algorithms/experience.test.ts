import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  alignTrajectory,
  computeReturns,
  lastActionIndex,
  makeExperience,
  overlongPenalty,
  resolveExperienceOptions,
  tokenRewards,
} from '../../algorithms/experience.ts';
import type { Trajectory } from '../../algorithms/trajectory.ts';
import { near, throwsCode } from './helpers.ts';

function traj(p: Partial<Trajectory> & Pick<Trajectory, 'inputIds' | 'lossMask'>): Trajectory {
  return {
    logprobs: p.lossMask.map((m) => (m ? -0.5 : 0)),
    versions: p.lossMask.map((m) => (m ? 0 : -1)),
    reward: 0,
    groupId: 'g',
    truncated: false,
    ...p,
  };
}

test('the action mask, logprobs and versions shift left by one token', () => {
  const s = alignTrajectory({
    inputIds: [5, 6, 7, 8],
    lossMask: [0, 0, 1, 1],
    logprobs: [0, 0, -0.3, -1.2],
    versions: [-1, -1, 3, 3],
    reward: 1,
    groupId: 'p17',
    truncated: false,
  });
  near(s.actionMask, [0, 1, 1]);
  near(s.behaviourLogprobs, [0, -0.3, -1.2]);
  near(s.versions, [-1, 3, 3]);
  assert.is(s.responseLength, 2);
  near(s.inputIds, [5, 6, 7, 8]);
});

test('environment tokens of a multi-turn episode stay masked and do not count as response', () => {
  const [s] = makeExperience([
    traj({ inputIds: [1, 2, 3, 4, 5, 6, 7], lossMask: [0, 0, 1, 1, 0, 0, 1] }),
  ]);
  near(s!.actionMask, [0, 1, 1, 0, 0, 1]);
  near(s!.versions, [-1, 0, 0, -1, -1, 0]);
  assert.is(s!.responseLength, 3);
  assert.is(lastActionIndex(s!.actionMask), 5);
});

test('single-token response and a lone token', () => {
  const [one, lone] = makeExperience([
    traj({ inputIds: [5, 6, 7], lossMask: [0, 0, 1], reward: 1 }),
    traj({ inputIds: [5], lossMask: [0], reward: 1 }),
  ]);
  near(one!.actionMask, [0, 1]);
  near(tokenRewards(one!.actionMask, 1), [0, 1]);
  assert.is(lone!.actionMask.length, 0);
  assert.is(lastActionIndex(lone!.actionMask), -1);
  near(tokenRewards(lone!.actionMask, 1), []);
});

test('malformed trajectories are rejected with the field named', () => {
  throwsCode(
    () => makeExperience([traj({ inputIds: [1, 2], lossMask: [0] })]),
    'SHAPE_MISMATCH',
    'trajectories[0].lossMask',
  );
  throwsCode(
    () => makeExperience([traj({ inputIds: [1, 2], lossMask: [1, 1] })]),
    'SHAPE_MISMATCH',
    'lossMask[0]',
  );
  throwsCode(
    () =>
      makeExperience([
        traj({ inputIds: [1], lossMask: [0] }),
        traj({ inputIds: [1, 2], lossMask: [0, 1], logprobs: [0, NaN] }),
      ]),
    'NON_FINITE_INPUT',
    'trajectories[1].logprobs[1]',
  );
  throwsCode(
    () => makeExperience([traj({ inputIds: [1, 2], lossMask: [0, 1], reward: Infinity })]),
    'NON_FINITE_INPUT',
    'reward',
  );
  throwsCode(
    () =>
      makeExperience([
        traj({ inputIds: [1, 2], lossMask: [0, 1], turnRewards: [{ index: 0, reward: 1 }] }),
      ]),
    'SHAPE_MISMATCH',
    'turnRewards[0]',
  );
});

test('DAPO overlong penalty is 0 before the buffer and −factor at the limit', () => {
  assert.is(overlongPenalty(6, 10, 4), 0);
  assert.is(overlongPenalty(3, 10, 4), 0);
  assert.is(overlongPenalty(8, 10, 4), -0.5);
  assert.is(overlongPenalty(10, 10, 4), -1);
  assert.is(overlongPenalty(10, 10, 4, 2), -2);
  const [s] = makeExperience(
    [
      traj({
        inputIds: [0, 1, 1, 1, 1, 1, 1, 1, 1],
        lossMask: [0, 1, 1, 1, 1, 1, 1, 1, 1],
        reward: 1,
      }),
    ],
    {
      overlongBufferLen: 4,
      maxNewTokens: 10,
    },
  );
  assert.is(s!.responseLength, 8);
  near([s!.score, s!.overlongPenalty], [0.5, -0.5]);
  throwsCode(
    () => resolveExperienceOptions({ overlongBufferLen: 4 }),
    'INVALID_OPTION',
    '--overlong-buffer-len',
  );
  throwsCode(
    () => resolveExperienceOptions({ rewardClipRange: [1, -1] }),
    'INVALID_OPTION',
    '--reward-clip-range',
  );
});

test('reward bias and scale (AReaL GSM8K: bias −0.5, scale 10 → ±5)', () => {
  const out = makeExperience(
    [
      traj({ inputIds: [1, 2], lossMask: [0, 1], reward: 1 }),
      traj({ inputIds: [1, 2], lossMask: [0, 1], reward: 0 }),
    ],
    { rewardBias: -0.5, rewardScale: 10 },
  );
  near(
    out.map((s) => s.score),
    [5, -5],
  );
});

test('token rewards: clipped score on the last action token, −β·KL everywhere', () => {
  near(tokenRewards([0, 1, 1, 0], 15, { clipRange: [-10, 10] }), [0, 0, 10, 0]);
  near(
    tokenRewards([0, 1, 1, 0], 15, { clipRange: [-10, 10], kl: [0, 0.1, 0.2, 0], klCoef: 0.5 }),
    [0, -0.05, 9.9, 0],
  );
  near(tokenRewards([0, 0, 0], 3), [0, 0, 0]);
  near(
    tokenRewards([0, 1, 0, 1], 0, {
      turnRewards: [
        { position: 1, reward: 2 },
        { position: 3, reward: 20 },
      ],
      clipRange: [-5, 5],
      overlongPenalty: -1,
    }),
    [0, 2, 0, 4],
  );
});

test('computeReturns: group_norm with k1 KL penalty (hand-computed)', () => {
  const samples = makeExperience([
    traj({ inputIds: [1, 2, 3, 4], lossMask: [0, 0, 1, 1], logprobs: [0, 0, -1, -1], reward: 1 }),
    traj({ inputIds: [1, 2, 3], lossMask: [0, 0, 1], logprobs: [0, 0, -2], reward: 0 }),
  ]);
  const refLogprobs = [
    [0, -1.5, -1],
    [0, -2.5],
  ];
  const b = computeReturns(
    samples,
    { refLogprobs },
    { advantage: { estimator: 'group_norm', nSamplesPerPrompt: 2 }, klCoef: 0.1 },
  );
  const a = Math.SQRT1_2;
  near(b.kl[0]!, [0, 0.5, 0]);
  near(b.kl[1]!, [0, 0.5]);
  near([b.meanKl], [0.375]);
  near(b.tokenRewards[0]!, [0, -0.05, a]);
  near(b.tokenRewards[1]!, [0, -a - 0.05]);
  near(b.advantages[0]!, [0, a - 0.05, a]);
  near(b.advantages[1]!, [0, -a - 0.05]);
  near(b.oldLogprobs[0]!, [0, -1, -1]);

  const l = computeReturns(
    samples,
    { refLogprobs },
    {
      advantage: { estimator: 'group_norm', nSamplesPerPrompt: 2 },
      klCoef: 0.1,
      useKlLoss: true,
    },
  );
  near(l.advantages[0]!, [0, a, a]);
  near(l.kl[0]!, [0, 0.5, 0]);
});

test('computeReturns: gae with critic values and per-turn rewards', () => {
  const samples = makeExperience([
    traj({
      inputIds: [1, 2, 3, 4, 5],
      lossMask: [0, 1, 0, 1, 1],
      reward: 3,
      turnRewards: [
        { index: 1, reward: 1 },
        { index: 4, reward: 2 },
      ],
    }),
  ]);
  const b = computeReturns(
    samples,
    { values: [[0, 0, 0, 0]] },
    { advantage: { estimator: 'gae' } },
  );
  near(b.tokenRewards[0]!, [1, 0, 0, 2]);
  near(b.returns[0]!, [3, 0, 2, 2]);
});

test('computeReturns: a fully masked row next to a normal one yields zeros, not NaN', () => {
  const samples = makeExperience([
    traj({ inputIds: [1, 2, 3], lossMask: [0, 0, 0], reward: 1, groupId: 'a' }),
    traj({ inputIds: [1, 2, 3], lossMask: [0, 1, 1], reward: 1, groupId: 'b' }),
  ]);
  const b = computeReturns(samples, {}, { advantage: { estimator: 'reinforce' } });
  near(b.advantages[0]!, [0, 0]);
  near(b.advantages[1]!, [0, 0]);
  near(b.returns[1]!, [1, 1]);
});

test('computeReturns rejects mismatched or non-finite model outputs', () => {
  const samples = makeExperience([traj({ inputIds: [1, 2, 3], lossMask: [0, 1, 1] })]);
  throwsCode(
    () => computeReturns(samples, { refLogprobs: [[0, 0, 0]] }),
    'SHAPE_MISMATCH',
    'refLogprobs[0]',
  );
  throwsCode(
    () => computeReturns(samples, { values: [[0, NaN]] }),
    'NON_FINITE_INPUT',
    'values[0]',
  );
  throwsCode(() => computeReturns(samples, { refLogprobs: [] }), 'SHAPE_MISMATCH', 'refLogprobs');
});

test.run();
