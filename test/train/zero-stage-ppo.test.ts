/**
 * `train_ppo --zero_stage 2` end to end on the torch backend: 2 trainer and 2 critic ranks
 * (gae) shard AdamW over their c10d Gloo groups, the roles line names the collective, every rank
 * joins each checkpoint (rank 0 writes the whole state), and the run resumes on 1 rank, unsharded,
 * where it stopped.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { init, shutdown } from '../../runtime/index.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
// The workers inherit it: every role trains on torch, so the ranks meet over gloo.
process.env.RTJOB_TF_BACKEND = 'torch';
process.env.OMP_NUM_THREADS = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-zero-ppo-'));
let model = '';

test.before(async () => {
  model = await writeTinyModel(root);
  await init({ address: 'local', local: { node: { numCpus: 4 } } });
});
test.after(async () => {
  await shutdown();
  rmSync(root, { recursive: true, force: true });
});

const run = (extra: string[]): string[] => [
  '--pretrain',
  model,
  '--agent-func',
  fileURLToPath(new URL('../fixtures/agents/parity-step.ts', import.meta.url)),
  '--rollout-batch-size',
  '4',
  '--n-samples-per-prompt',
  '2',
  '--train-batch-size',
  '8',
  '--micro-train-batch-size',
  '2',
  '--generate-max-len',
  '6',
  '--eval-dataset',
  '',
  '--advantage-estimator',
  'gae',
  '--save-path',
  join(root, 'out'),
  '--ckpt-path',
  join(root, 'ckpt'),
  ...extra,
];

test('train_ppo --zero_stage 2 trains 2 ranks and resumes on 1', async () => {
  const lines: string[] = [];
  const rows: Record<string, number>[] = [];
  const s = await trainPpo(
    run([
      '--actor-num-replicas',
      '2',
      '--critic-num-replicas',
      '2',
      '--zero_stage',
      '2',
      '--max-steps',
      '2',
      '--save-steps',
      '1',
    ]),
    {},
    { log: { line: (l: string) => lines.push(l), metric: (_s, v) => rows.push(v) } },
  );
  assert.is(s.steps, 2);
  assert.ok(
    lines.some((l) => /collective gloo/.test(l)),
    `the roles line names the collective:\n${lines.join('\n')}`,
  );
  const steps = rows.filter((r) => r.policy_loss !== undefined);
  assert.ok(steps.every((r) => Number.isFinite(r.policy_loss!) && Number.isFinite(r.value_loss!)));
  const resumed = await trainPpo(
    run(['--in-process', '--max-steps', '3', '--load-checkpoint']),
    {},
    { log: { line: () => {}, metric: () => {} } },
  );
  assert.is(resumed.steps, 3);
  assert.equal(resumed.trainedPrompts.slice(0, 8), s.trainedPrompts, 'resumed where it stopped');
});

test.run();
