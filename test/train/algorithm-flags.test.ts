/**
 * The algorithm flags reach the code that uses them: a run with every one of them set trains,
 * the adaptive KL controller moves the logged coefficient, the IS correction and token-budget
 * packing reach the trainer, and the reward normaliser's statistics survive a resume.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../train/ppo/main.ts';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { roleInits } from '../../train/ppo/roles.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { compileRunConfig } from '../../train/ppo/run-config.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-algo-flags-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

const agent = fileURLToPath(new URL('../fixtures/agents/parity-step.ts', import.meta.url));
const tiny = (name: string, extra: string[]): string[] => [
  '--in-process',
  '--pretrain',
  model,
  '--agent-func',
  agent,
  '--rollout-batch-size',
  '4',
  '--n-samples-per-prompt',
  '2',
  '--train-batch-size',
  '8',
  '--micro-train-batch-size',
  '4',
  '--generate-max-len',
  '8',
  '--max-steps',
  '3',
  '--eval-dataset',
  '',
  '--overwrite',
  '--save-path',
  join(root, name, 'out'),
  '--ckpt-path',
  join(root, name, 'ckpt'),
  ...extra,
];
const collect = () => {
  const rows: Record<string, number>[] = [];
  return {
    rows,
    log: { line: () => {}, metric: (_s: number, v: Record<string, number>) => void rows.push(v) },
  };
};

test('the flags map onto the trainer and critic options under their own names', () => {
  const o = parseTrainPpoFlags([
    '--is-correction',
    'icepop',
    '--is-threshold',
    '0.8',
    '1.25',
    '--loss-agg-mode',
    'seq-mean-token-mean',
    '--train-max-tokens-per-gpu',
    '64',
    '--advantage-estimator',
    'gae',
  ]);
  const init = roleInits(compileRunConfig(o, 10));
  assert.equal(init.trainer.loss.isCorrection, 'icepop');
  assert.equal(init.trainer.loss.isThreshold, [0.8, 1.25]);
  assert.is(init.trainer.loss.lossAggMode, 'seq-mean-token-mean');
  assert.is(init.trainer.trainMaxTokensPerGpu, 64);
  assert.is(init.critic.lossAggMode, 'seq-mean-token-mean');
  assert.is(init.critic.trainMaxTokensPerGpu, 64);
  // The trainer takes the loss resolved (defaults filled once, in the driver); an option with
  // no default is left out, not sent as undefined (it crosses the wire).
  assert.is(init.trainer.loss.epsClipHigh, init.trainer.loss.epsClip);
  assert.not.ok('dualClip' in init.trainer.loss);
});

test('a run with every algorithm flag set trains, and the adaptive KL coefficient moves', async () => {
  const { rows, log } = collect();
  const s = await trainPpo(
    tiny('all', [
      '--advantage-estimator',
      'gae',
      '--init-kl-coef',
      '0.05',
      '--kl-target',
      '0.0001',
      '--kl-horizon',
      '10',
      '--is-correction',
      'tis',
      '--is-threshold',
      '0.5',
      '2',
      '--loss-agg-mode',
      'seq-mean-token-sum-norm',
      '--normalize-reward',
      '--reward-scale',
      '2',
      '--reward-bias',
      '0.5',
      '--reward-clip-range',
      '-3',
      '3',
      '--overlong-buffer-len',
      '4',
      '--overlong-penalty-factor',
      '0.5',
      '--train-max-tokens-per-gpu',
      '48',
      '--eps-clip-high',
      '0.3',
      '--dual-clip',
      '3',
      '--entropy-loss-coef',
      '0.001',
      '--dynamic-filtering',
      '--dynamic-filtering-reward-range',
      '-1',
      '2',
    ]),
    {},
    { log },
  );
  assert.is(s.steps, 3);
  const steps = rows.filter((r) => r.policy_loss !== undefined);
  assert.ok(steps.length >= 2);
  assert.ok(steps.every((r) => Number.isFinite(r.policy_loss!) && Number.isFinite(r.value_loss!)));
  // --is-correction recomputes the trainer's logprobs: the train-inference mismatch is logged.
  assert.ok(
    steps.every(
      (r) =>
        r.logprob_gap! >= 0 &&
        r.is_ratio_min! <= r.is_ratio_mean! &&
        r.is_ratio_mean! <= r.is_ratio_max!,
    ),
    JSON.stringify(steps[0]),
  );
  const coefs = steps.map((r) => r.kl_coef!);
  assert.ok(coefs[coefs.length - 1]! !== coefs[0], `adaptive β moved: ${coefs.join(', ')}`);
});

test('--normalize-reward statistics are checkpointed and resumed', async () => {
  const args = (steps: string, more: string[] = []) =>
    tiny('norm', [
      '--normalize-reward',
      '--advantage-estimator',
      'reinforce',
      '--save-steps',
      '1',
      '--max-steps',
      steps,
      ...more,
    ]);
  await trainPpo(args('1'), {}, collect());
  const ckpt = join(root, 'norm', 'ckpt', 'global_step_1');
  const saved = JSON.parse(readFileSync(join(ckpt, 'trainer_state.json'), 'utf8')) as {
    driver: { rewardStats?: { count: number } };
  };
  assert.is(saved.driver.rewardStats?.count, 8, 'one step of 8 samples seen');
  const resumed = await trainPpo(args('2', ['--load-checkpoint']), {}, collect());
  assert.is(resumed.steps, 2);
});

test.run();
