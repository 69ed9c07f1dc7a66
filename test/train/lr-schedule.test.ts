/**
 * OpenRLHF's optimizer flags: `--lr-scheduler`, `--lr-warmup-ratio`, `--min-lr-ratio`, `--l2` and
 * the two learning rates reach the trainer and the critic, every step logs the rate each used
 * (`actor_lr`, `critic_lr`), and a run stopped and resumed from its checkpoint continues the
 * schedule where it stopped.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { learningRate } from '../../model/lr-schedule.ts';
import { FlagError, parseTrainPpoFlags, trainPpo, trainPpoHelp } from '../../train/ppo/main.ts';
import { lrScheduleOptions } from '../../train/ppo/options.ts';
import { roleInits } from '../../train/ppo/roles.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { compileRunConfig } from '../../train/ppo/run-config.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-lr-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

const flagError = (argv: string[]): string => {
  try {
    parseTrainPpoFlags(argv);
  } catch (e) {
    if (e instanceof FlagError) return e.message;
    throw e;
  }
  return '';
};

test("OpenRLHF's snake_case optimizer flags parse, and --help lists them", () => {
  const o = parseTrainPpoFlags([
    '--lr_scheduler',
    'linear',
    '--lr_warmup_ratio',
    '0.1',
    '--min_lr_ratio',
    '0.2',
    '--l2',
    '0.01',
    '--actor_learning_rate',
    '1e-5',
    '--critic_learning_rate',
    '2e-5',
  ]);
  assert.equal(
    [o.lrScheduler, o.lrWarmupRatio, o.minLrRatio, o.l2, o.actorLearningRate, o.criticLearningRate],
    ['linear', 0.1, 0.2, 0.01, 1e-5, 2e-5],
  );
  const help = trainPpoHelp();
  for (const f of ['--lr-scheduler', '--lr-warmup-ratio', '--min-lr-ratio', '--l2'])
    assert.ok(help.includes(f), `--help lists ${f}`);
  assert.match(flagError(['--lr-scheduler', 'step']), /--lr-scheduler: 'step' is not one of/);
  assert.match(
    flagError(['--lr-scheduler', 'constant', '--lr-warmup-ratio', '0.1']),
    /constant has no warmup.*constant_with_warmup/,
  );
  assert.match(flagError(['--lr-warmup-ratio', '2']), /fraction in \[0, 1\]/);
});

test("the schedule spans the run's optimizer steps, for the trainer and the critic", () => {
  // 4 prompts × 2 samples / 4 per optimizer step × 2 epochs = 4 optimizer steps per step.
  const o = parseTrainPpoFlags([
    '--rollout-batch-size',
    '4',
    '--n-samples-per-prompt',
    '2',
    '--train-batch-size',
    '4',
    '--micro-train-batch-size',
    '2',
    '--max-epochs',
    '2',
    '--lr-warmup-ratio',
    '0.1',
    '--l2',
    '0.05',
    '--advantage-estimator',
    'gae',
  ]);
  assert.equal(lrScheduleOptions(o, 5), {
    scheduler: 'cosine_with_min_lr',
    warmupSteps: 2,
    totalSteps: 20,
    minLrRatio: 0.1,
  });
  const init = roleInits(compileRunConfig(o, 5));
  assert.equal(init.trainer.lrSchedule, lrScheduleOptions(o, 5));
  assert.equal(init.critic.lrSchedule, lrScheduleOptions(o, 5));
  assert.is(init.trainer.weightDecay, 0.05);
  assert.is(init.critic.weightDecay, 0.05);
});

/** A 3-step gae run (2 optimizer steps a step) with a linear schedule and warmup. */
const runArgs = (name: string, extra: Record<string, string | number | boolean> = {}) =>
  tinyRunArgs(model, join(root, name, 'out'), {
    'in-process': true,
    'train-batch-size': 4,
    'micro-train-batch-size': 4,
    'max-steps': 3,
    'advantage-estimator': 'gae',
    'actor-learning-rate': 0.01,
    'critic-learning-rate': 0.02,
    'lr-scheduler': 'linear',
    'lr-warmup-ratio': 0.34,
    'save-steps': 1,
    'ckpt-path': join(root, name, 'ckpt'),
    seed: 3,
    ...extra,
  });

type Rates = { step: number; actor: number; critic: number }[];
const collect = (rates: Rates, stopAt?: number) => ({
  line: () => {},
  metric: (step: number, v: Record<string, number>) => {
    if (v.actor_lr === undefined) return;
    // A stop after the checkpoint of the step before: this step's work is lost, as on a kill.
    if (step === stopAt) throw new Error(`stopped at step ${step}`);
    rates.push({ step, actor: v.actor_lr, critic: v.critic_lr! });
  },
});

test('each step logs the rate of its last optimizer step; a resumed run continues the schedule', async () => {
  const full: Rates = [];
  await trainPpo(runArgs('full'), {}, { log: collect(full) });
  // 6 optimizer steps, 3 of warmup (⌈6 × 0.34⌉); step k ends with optimizer step 2k − 1.
  const schedule = (lr: number, k: number) =>
    learningRate({ lr, scheduler: 'linear', warmupSteps: 3, totalSteps: 6 }, 2 * k - 1);
  assert.equal(
    full.map((r) => r.step),
    [1, 2, 3],
  );
  for (const r of full) {
    assert.ok(Math.abs(r.actor - schedule(0.01, r.step)) < 1e-12, `actor_lr at ${r.step}`);
    assert.ok(Math.abs(r.critic - schedule(0.02, r.step)) < 1e-12, `critic_lr at ${r.step}`);
  }
  assert.ok(
    new Set(full.map((r) => r.actor)).size === 3,
    `the rate moves every step: ${full.map((r) => r.actor)}`,
  );

  const stopped: Rates = [];
  const err = await trainPpo(runArgs('resume'), {}, { log: collect(stopped, 2) }).catch(
    (e: Error) => e,
  );
  assert.match(String(err), /stopped at step 2/);
  const resumed: Rates = [];
  await trainPpo(runArgs('resume', { 'load-checkpoint': true }), {}, { log: collect(resumed) });
  assert.equal(
    [...stopped, ...resumed],
    full,
    'the stopped run and its resumption log the same rates as the run that never stopped',
  );
});

test.run();
