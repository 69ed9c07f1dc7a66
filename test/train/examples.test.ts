import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../train/ppo/main.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-examples-'));
let model = '';
const example = (name: string): string =>
  fileURLToPath(new URL(`../../examples/${name}`, import.meta.url));
const log = { line: () => undefined, metric: () => undefined };
const tiny = (extra: string[]): string[] => [
  '--in-process',
  '--pretrain',
  model,
  '--rollout-batch-size',
  '2',
  '--train-batch-size',
  '4',
  '--micro-train-batch-size',
  '4',
  '--generate-max-len',
  '5',
  '--max-steps',
  '1',
  '--eval-prompts',
  '2',
  '--overwrite',
  '--save-path',
  join(root, 'out'),
  ...extra,
];

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

test('examples/agent.ts (multi-turn step function) runs a step', async () => {
  const s = await trainPpo(
    tiny(['--agent-func', example('agent.ts'), '--n-samples-per-prompt', '2']),
    {},
    { log },
  );
  assert.is(s.steps, 1);
});

test('examples/reflection.ts (workflow, groups for GRPO) runs a step', async () => {
  const s = await trainPpo(
    tiny([
      '--agent-func',
      example('reflection.ts'),
      '--n-samples-per-prompt',
      '2',
      '--advantage-estimator',
      'group_norm',
    ]),
    {},
    { log },
  );
  assert.is(s.steps, 1);
});

test('examples/remax.ts (sampled minus greedy reward) runs a step', async () => {
  const s = await trainPpo(
    tiny([
      '--agent-func',
      example('remax.ts'),
      '--n-samples-per-prompt',
      '1',
      '--advantage-estimator',
      'reinforce',
      '--train-batch-size',
      '2',
      '--micro-train-batch-size',
      '2',
    ]),
    {},
    { log },
  );
  assert.is(s.steps, 1);
});

test('examples/custom-loop.ts (a hand-written loop on actors) trains and exits', () => {
  const r = spawnSync(
    process.execPath,
    [
      '--conditions=rtjob-source',
      '--import',
      'tsx',
      example('custom-loop.ts'),
      '--steps',
      '2',
      '--pretrain',
      model,
      '--prompts',
      '2',
      '--samples',
      '2',
      '--max-new-tokens',
      '5',
    ],
    { env: { ...process.env, HOME: root, RTJOB_ADDRESS: '' }, encoding: 'utf8', timeout: 120_000 },
  );
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stdout, /step 1\/2 {2}reward -?[\d.]+ {2}loss -?[\d.]+ {2}version 1/);
  assert.match(r.stdout, /step 2\/2 .* version 2/);
});

test.run();
