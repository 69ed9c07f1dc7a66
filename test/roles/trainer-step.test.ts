import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Trainer, type TrainSample } from '../../roles/trainer.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

// A training step is long synchronous compute; the trainer's worker must still answer heartbeats
// (the head drops a worker that stays silent for 30 s), so train() yields between micro-batches.
process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-trainer-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

const sample = (len: number, seed: number): TrainSample => {
  const inputIds = Array.from({ length: len }, (_, i) => 3 + ((i * 7 + seed) % 20));
  const actionMask = Array.from({ length: len - 1 }, (_, i) => (i >= 2 ? 1 : 0));
  return {
    inputIds,
    actionMask,
    advantages: actionMask.map((m) => m * (seed % 2 ? 1 : -1)),
    oldLogprobs: actionMask.map(() => -3),
  };
};

test('timers run while a step of many micro-batches trains, and the step still trains', async () => {
  const trainer = new Trainer({
    pretrain: model,
    learningRate: 1e-2,
    trainBatchSize: 16,
    microTrainBatchSize: 2,
  });
  try {
    await trainer.ready();
    const samples = Array.from({ length: 16 }, (_, i) => sample(6 + (i % 5), i));
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    const stats = await trainer.train(samples);
    clearInterval(timer);
    assert.ok(ticks >= 4, `event loop turns during the step: ${ticks}`);
    assert.is(stats.optimizerSteps, 1);
    assert.is(stats.version, 1);
    assert.ok(Number.isFinite(stats.policyLoss) && stats.gradNorm > 0);
  } finally {
    trainer.dispose();
  }
});

test('a batch with a NaN advantage is refused naming the input, and leaves no gradient behind', async () => {
  const init = { pretrain: model, learningRate: 1e-2, trainBatchSize: 4, microTrainBatchSize: 2 };
  const [a, b] = [new Trainer(init), new Trainer(init)];
  try {
    await Promise.all([a.ready(), b.ready()]);
    const good = Array.from({ length: 4 }, (_, i) => sample(6 + i, i));
    const bad = good.map((x, i) =>
      i === 3 ? { ...x, advantages: Array.from(x.actionMask, (_, j) => (j === 2 ? NaN : 1)) } : x,
    );
    // the bad sample sits in the second micro-batch: the first one's gradient is already in
    const err = await a.train(bad).then(
      () => undefined,
      (e: Error & { code?: string }) => e,
    );
    assert.is(err?.code, 'NON_FINITE_INPUT');
    assert.match(err!.message, /advantages holds NaN or Infinity/);
    const [sa, sb] = [await a.train(good), await b.train(good)];
    assert.is(sa.policyLoss, sb.policyLoss);
    assert.is(sa.gradNorm, sb.gradNorm, 'the refused step left nothing in the accumulator');
  } finally {
    a.dispose();
    b.dispose();
  }
});

test.run();
