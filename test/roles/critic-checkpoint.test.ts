import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Critic, type CriticSample } from '../../roles/critic.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-critic-ckpt-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

const seqs = [
  [1, 5, 9, 13, 7],
  [1, 6, 6, 20],
];
const samples: CriticSample[] = seqs.map((s) => ({
  inputIds: s,
  actionMask: s.slice(1).map((_, i) => (i >= 1 ? 1 : 0)),
  oldValues: s.slice(1).map(() => 0),
  returns: s.slice(1).map(() => 1),
}));
const init = () => ({
  pretrain: model,
  learningRate: 1e-2,
  trainBatchSize: 2,
  microTrainBatchSize: 2,
});

test('a critic restored from its checkpoint gives the same values and keeps training the same way', async () => {
  const a = new Critic(init());
  const b = new Critic(init());
  try {
    await Promise.all([a.ready(), b.ready()]);
    await a.train(samples);
    await a.saveCheckpoint(join(root, 'c'));
    b.loadCheckpoint(join(root, 'c'));
    const close = (x: number[][], y: number[][]): boolean =>
      x.every((r, i) => r.every((v, j) => Math.abs(v - y[i]![j]!) < 1e-6));
    assert.ok(close(await a.values(seqs), await b.values(seqs)), 'values after restore');
    await a.train(samples);
    await b.train(samples);
    assert.ok(close(await a.values(seqs), await b.values(seqs)), 'optimizer moments restored too');
  } finally {
    a.dispose();
    b.dispose();
  }
});

// The fixture rejects odd prompts, so some steps train on nothing: those still checkpoint.
test('train_ppo with gae checkpoints the critic and resumes it', async () => {
  const ck = join(root, 'ckpt');
  const flags = tinyRunArgs(model, join(root, 'out'), {
    'in-process': true,
    'agent-func': fileURLToPath(new URL('../fixtures/agents/group-workflow.ts', import.meta.url)),
    'advantage-estimator': 'gae',
    'rollout-batch-size': 2,
    'train-batch-size': 4,
    'micro-train-batch-size': 4,
    'save-steps': 1,
    'ckpt-path': ck,
  });
  const log = { line: () => undefined, metric: () => undefined };
  await trainPpo([...flags, '--max-steps', '1'], {}, { log });
  assert.ok(
    existsSync(join(ck, 'global_step_1', 'critic', 'optimizer.safetensors')),
    'critic saved at step 1',
  );
  const lines: string[] = [];
  const s = await trainPpo(
    [...flags, '--max-steps', '2', '--load-checkpoint'],
    {},
    { log: { line: (t) => void lines.push(t), metric: () => undefined } },
  );
  assert.is(s.steps, 2);
  assert.ok(
    lines.some((l) => l.includes('resumed from')),
    lines.join('\n'),
  );
  assert.ok(
    existsSync(join(ck, 'global_step_2', 'critic', 'model.safetensors')),
    'critic saved at step 2',
  );
});

test.run();
