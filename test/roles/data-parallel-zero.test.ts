/**
 * ZeRO-2 through the Trainer role: two torch ranks with `zeroStage: 2` meet over c10d Gloo, stay
 * bit-identical, step like one trainer on the same data (the tolerance of
 * test/model/zero-optimizer.test.ts), and a checkpoint
 * that every rank joins (rank 0 writes it) resumes on one trainer alone with the same weights.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Trainer } from '../../roles/trainer.ts';
import { defineActor, init, kill, shutdown } from '../../runtime/index.ts';
import { tinyTrainSample, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-dp-zero-'));
let model = '';
const TrainerActor = defineActor<typeof Trainer>(
  new URL('../../roles/trainer.ts', import.meta.url),
  'Trainer',
);

test.before(async () => {
  model = await writeTinyModel(root);
  await init({ address: 'local', local: { node: { numCpus: 4 } } });
});
test.after(async () => {
  await shutdown();
  rmSync(root, { recursive: true, force: true });
});

const samples = Array.from({ length: 8 }, (_, i) => tinyTrainSample(6 + (i % 4), i));
const init0 = { learningRate: 1e-2, trainBatchSize: 8, microTrainBatchSize: 2 };
const env = { RTJOB_TF_BACKEND: 'torch', OMP_NUM_THREADS: '1' };

test('two ZeRO-2 torch ranks train like one trainer and checkpoint whole', async () => {
  const group = `dp-zero-${Date.now()}`;
  const ranks = [0, 1].map((rank) =>
    TrainerActor.options({ env }).remote({
      pretrain: model,
      ...init0,
      zeroStage: 2,
      dataParallel: { group, rank, worldSize: 2 },
    }),
  );
  const alone = TrainerActor.options({ env }).remote({ pretrain: model, ...init0 });
  try {
    await Promise.all([...ranks, alone].map((r) => r.ready.remote()));
    const stats = await Promise.all(ranks.map((r) => r.train.remote(samples)));
    const one = await alone.train.remote(samples);
    assert.ok(Math.abs(stats[0]!.gradNorm - one.gradNorm) <= 1e-5 * one.gradNorm, 'grad norm');
    const dir = join(root, 'ckpt');
    await Promise.all(ranks.map((r) => r.saveCheckpoint.remote(dir, { note: 'zero' })));
    const [w0, w1] = await Promise.all(ranks.map((r) => r.weightsDigest.remote()));
    assert.is(w0!.sha256, w1!.sha256, 'the ranks hold the same weights');
    const resumed = TrainerActor.options({ env }).remote({ pretrain: model, ...init0 });
    try {
      await resumed.ready.remote();
      assert.is((await resumed.loadCheckpoint.remote(dir))['note'], 'zero');
      assert.is((await resumed.weightsDigest.remote()).sha256, w0!.sha256, 'resumed exactly');
    } finally {
      await kill(resumed);
    }
  } finally {
    await Promise.all([...ranks, alone].map((r) => kill(r)));
  }
});

test.run();
