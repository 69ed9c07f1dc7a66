/**
 * `--advantage-estimator grpo` (= `group_norm`) is OpenRLHF's GRPO: the advantages the driver's
 * options give equal OpenRLHF's `(r - r.mean(-1)) / (r.std(-1) + 1e-9)` on a constructed batch,
 * with `torch.std`'s default (unbiased, n - 1) std. `--no-advantage-std-norm` (OpenRLHF's
 * spelling, snake case too) keeps the mean subtraction only, which is `dr_grpo`, the driver's
 * default estimator.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { computeReturns, makeExperience } from '../../algorithms/experience.ts';
import type { Trajectory } from '../../algorithms/trajectory.ts';
import { parseTrainPpoFlags, trainPpoHelp } from '../../train/ppo/flags.ts';
import { advantageOptions } from '../../train/ppo/options.ts';

/** Two prompts, four samples each; responses of different lengths, rewards on the last token. */
const rewards = [
  [1, 0, 0.5, 0],
  [2, 2, 3, 2.5],
];
const trajectories: Trajectory[] = rewards.flatMap((group, g) =>
  group.map((reward, k) => {
    const actions = 1 + k;
    const lossMask = [0, 0, ...Array<number>(actions).fill(1)];
    return {
      inputIds: lossMask.map((_, i) => 10 + i),
      lossMask,
      logprobs: lossMask.map((m) => (m ? -0.5 : 0)),
      versions: lossMask.map((m) => (m ? 0 : -1)),
      reward,
      groupId: `p${g}`,
      truncated: false,
    };
  }),
);

/** OpenRLHF's group_norm, written out: torch.mean, torch.std (correction 1), eps 1e-9. */
function openrlhfGroupNorm(group: number[]): number[] {
  const n = group.length;
  const mean = group.reduce((a, b) => a + b, 0) / n;
  const std = Math.sqrt(group.reduce((a, r) => a + (r - mean) ** 2, 0) / (n - 1));
  return group.map((r) => (r - mean) / (std + 1e-9));
}

/** Per-sample advantages of the driver's estimator; every action token must carry the same value. */
function advantagesFor(argv: string[]): number[] {
  const o = parseTrainPpoFlags(['--n-samples-per-prompt', '4', ...argv]);
  const batch = computeReturns(
    makeExperience(trajectories),
    {},
    { advantage: advantageOptions(o) },
  );
  return batch.advantages.map((row, i) => {
    const mask = batch.samples[i]!.actionMask;
    const values = [...row].filter((_, t) => mask[t] === 1);
    assert.ok(values.length > 0);
    for (const v of values) assert.ok(Math.abs(v - values[0]!) < 1e-6, `row ${i}: ${row}`);
    return values[0]!;
  });
}

function near(actual: number[], expected: number[], tol = 1e-5): void {
  assert.is(actual.length, expected.length);
  actual.forEach((a, i) =>
    assert.ok(Math.abs(a - expected[i]!) < tol, `[${i}] ${a} != ${expected[i]} (${actual})`),
  );
}

test('grpo advantages equal OpenRLHF group_norm (unbiased std, eps 1e-9)', () => {
  const expected = rewards.flatMap(openrlhfGroupNorm);
  // The first group by hand: mean 0.375, unbiased std sqrt(0.6875 / 3) = 0.478714.
  near(expected.slice(0, 4), [1.305582, -0.783349, 0.261116, -0.783349]);
  near(advantagesFor(['--advantage_estimator', 'grpo']), expected);
  near(advantagesFor(['--advantage-estimator', 'group_norm']), expected);
});

test('--no-advantage-std-norm keeps the mean subtraction only, as dr_grpo (the default)', () => {
  const centred = rewards.flatMap((g) => g.map((r) => r - g.reduce((a, b) => a + b, 0) / g.length));
  near(advantagesFor(['--advantage-estimator', 'grpo', '--no-advantage-std-norm']), centred);
  near(advantagesFor(['--advantage_estimator=group_norm', '--no_advantage_std_norm']), centred);
  near(advantagesFor(['--advantage-estimator', 'dr_grpo']), centred);
  near(advantagesFor([]), centred);
  assert.is(parseTrainPpoFlags([]).advantageEstimator, 'dr_grpo');
});

test('--help names the positive flag and says which estimator divides by the std', () => {
  const help = trainPpoHelp();
  assert.match(help, /--advantage-std-norm .*--no-advantage-std-norm.*\(default true\)/);
  assert.match(help, /group_norm \(= grpo, as OpenRLHF's\) is \(score - group mean\) \/ group std/);
  assert.match(help, /--advantage-estimator .*\(default dr_grpo\)/);
});

test.run();
