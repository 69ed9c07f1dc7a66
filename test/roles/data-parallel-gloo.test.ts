/**
 * Data-parallel trainers on the torch backend: two Trainer actors meet in a c10d Gloo group by
 * default (the torch addon's, gradients all-reduced inside libtorch), say so in what `ready`
 * reports for the roles line, stay bit-identical over steps, and match one trainer's step on
 * the same data.
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
const root = mkdtempSync(join(tmpdir(), 'rtjob-dp-gloo-'));
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
const bits = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

test('two torch ranks train through gloo, stay bit-identical and match one trainer', async () => {
  const group = `dp-gloo-${Date.now()}`;
  const env = { RTJOB_TF_BACKEND: 'torch', OMP_NUM_THREADS: '1' };
  const ranks = [0, 1].map((rank) =>
    TrainerActor.options({ env }).remote({
      pretrain: model,
      ...init0,
      dataParallel: { group, rank, worldSize: 2 },
    }),
  );
  try {
    const ready = await Promise.all(ranks.map((r) => r.ready.remote()));
    assert.match(ready[0]!.backend, /^torch .*, collective gloo$/);
    const stats = await Promise.all(ranks.map((r) => r.train.remote(samples)));
    await Promise.all(ranks.map((r) => r.train.remote(samples.slice(0, 4))));
    const ws = await Promise.all(ranks.map((r) => r.weights.remote()));
    const t0 = ws[0]!.tensors!;
    const t1 = ws[1]!.tensors!;
    assert.equal(Object.keys(t0).sort(), Object.keys(t1).sort());
    for (const name of Object.keys(t0))
      assert.ok(
        bits(t0[name]!.data as Float32Array).equals(bits(t1[name]!.data as Float32Array)),
        `${name} is bit-identical on both ranks`,
      );
    const alone = TrainerActor.options({ env }).remote({ pretrain: model, ...init0 });
    try {
      await alone.ready.remote();
      const one = await alone.train.remote(samples);
      const close = (a: number, b: number, what: string) =>
        assert.ok(Math.abs(a - b) <= 1e-5 + 1e-4 * Math.abs(b), `${what}: ${a} vs ${b}`);
      close(stats[0]!.policyLoss, one.policyLoss, 'loss');
      close(stats[0]!.gradNorm, one.gradNorm, 'grad norm');
      assert.is(stats[0]!.tokens, one.tokens);
    } finally {
      await kill(alone);
    }
  } finally {
    await Promise.all(ranks.map((r) => kill(r)));
  }
});

test.run();
