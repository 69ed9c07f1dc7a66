/**
 * Numerical parity of the training path: the first three steps of fixed-seed in-process runs (one
 * per estimator family, and an async decoupled run) match the metrics recorded before the RL core
 * was unified onto `algorithms/` (commit 9d9754f, `fixtures/parity-baseline.json`).
 *
 * Record again only when a change is meant to alter the numbers:
 *   PARITY_RECORD=1 node --import tsx test/train/parity.test.ts
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../train/ppo/main.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const baselineFile = fileURLToPath(new URL('./fixtures/parity-baseline.json', import.meta.url));
const record = process.env.PARITY_RECORD === '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-parity-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

/** The metrics compared, per step. */
const keys = [
  'policy_loss',
  'clip_fraction',
  'kl',
  'grad_norm',
  'entropy',
  'value_loss',
  'reward_mean',
] as const;
/** Relative tolerance (float32 sums in a different order), with an absolute floor near zero. */
const rtol = 1e-4;
const atol = 1e-6;

const runs: Record<string, string[]> = {
  gae: ['--advantage-estimator', 'gae', '--init-kl-coef', '0.05', '--critic-learning-rate', '1e-2'],
  group_norm: [
    '--advantage-estimator',
    'group_norm',
    '--init-kl-coef',
    '0.05',
    '--use-kl-loss',
    '--kl-estimator',
    'k3',
    '--eps-clip-high',
    '0.28',
  ],
  reinforce_baseline: [
    '--advantage-estimator',
    'reinforce_baseline',
    '--init-kl-coef',
    '0.05',
    '--dual-clip',
    '3',
    '--entropy-loss-coef',
    '0.01',
  ],
  async_decoupled: [
    '--async-train',
    '--advantage-estimator',
    'group_norm',
    '--use-decoupled-loss',
    '--async-queue-size',
    '1',
  ],
};

async function firstSteps(name: string, extra: string[]): Promise<Record<string, number>[]> {
  const rows: { step: number; values: Record<string, number> }[] = [];
  const log = {
    line: () => {},
    metric: (step: number, values: Record<string, number>) => void rows.push({ step, values }),
  };
  const argv = [
    '--in-process',
    '--pretrain',
    model,
    '--agent-func',
    fileURLToPath(new URL('../fixtures/agents/parity-step.ts', import.meta.url)),
    '--rollout-batch-size',
    '4',
    '--n-samples-per-prompt',
    '2',
    '--train-batch-size',
    '4',
    '--micro-train-batch-size',
    '2',
    '--generate-max-len',
    '6',
    '--max-steps',
    '3',
    '--eval-dataset',
    '',
    '--seed',
    '7',
    '--actor-learning-rate',
    '1e-2',
    '--overwrite',
    // The baseline was recorded when train_ppo's default was the mean-only shaping.
    '--no-advantage-std-norm',
    '--save-path',
    join(root, name, 'out'),
    '--ckpt-path',
    join(root, name, 'ckpt'),
    ...extra,
  ];
  await trainPpo(argv, {}, { log });
  return rows
    .filter((r) => r.values.policy_loss !== undefined)
    .map((r) =>
      Object.fromEntries(
        keys.filter((k) => r.values[k] !== undefined).map((k) => [k, r.values[k]!]),
      ),
    );
}

const results: Record<string, Record<string, number>[]> = {};
const baseline: Record<string, Record<string, number>[]> = record
  ? {}
  : JSON.parse(readFileSync(baselineFile, 'utf8')).runs;

for (const [name, extra] of Object.entries(runs)) {
  test(`${name}: the first 3 steps match the recorded metrics`, async () => {
    const got = await firstSteps(name, extra);
    results[name] = got;
    assert.is(got.length, 3, 'three trained steps');
    if (record) return;
    const want = baseline[name]!;
    let worst = 0;
    got.forEach((row, i) => {
      assert.equal(
        Object.keys(row).sort(),
        Object.keys(want[i]!).sort(),
        `step ${i + 1}: same metrics`,
      );
      for (const [k, v] of Object.entries(want[i]!)) {
        const diff = Math.abs(row[k]! - v);
        worst = Math.max(worst, diff / Math.max(Math.abs(v), atol));
        assert.ok(
          diff <= atol + rtol * Math.abs(v),
          `${name} step ${i + 1} ${k}: ${row[k]} vs recorded ${v}`,
        );
      }
    });
    console.log(`  ${name}: largest relative difference ${worst.toExponential(1)}`);
  });
}

test.after(() => {
  if (record)
    writeFileSync(
      baselineFile,
      JSON.stringify(
        { recordedAt: process.env.PARITY_COMMIT ?? 'unknown', runs: results },
        null,
        2,
      ) + '\n',
    );
});

test.run();
