/**
 * The trainer and the critic with `packingSamples` (`--packing-samples`) and
 * `gradientCheckpointing` (`--gradient-checkpointing`) train as with padded rows and kept
 * activations: on a long-tailed mix of sample lengths, the same PPO loss, entropy and gradient
 * norm (1e-5 relative) and the same weights after the step (1e-6 absolute, at learning rate 1e-3:
 * a thousandth of AdamW's first move), and the same value loss over two critic steps. On the
 * default backend (wasm here), through the roles' own micro-batching.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Critic, type CriticSample } from '../../roles/critic.ts';
import { Trainer, type TrainerInit, type TrainSample } from '../../roles/trainer.ts';
import { maxAbsDiff } from '../fixtures/model/tiny.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-packing-'));
let model = '';
test.before(async () => {
  model = await writeTinyModel(root, { num_hidden_layers: 2 });
});
test.after(() => rmSync(root, { recursive: true, force: true }));

// Lengths 4..9 and one of 30: most short, one long.
const lengths = [5, 30, 4, 6, 9, 5, 4, 7];
const sample = (len: number, seed: number): TrainSample => {
  const inputIds = Array.from({ length: len }, (_, i) => 3 + ((i * 7 + seed * 5) % 60));
  const actionMask = Array.from({ length: len - 1 }, (_, i) => (i >= 2 ? 1 : 0));
  return {
    inputIds,
    actionMask,
    advantages: actionMask.map((m, i) => m * (seed % 2 ? 1 : -0.5) * (1 + i / 10)),
    oldLogprobs: actionMask.map((_, i) => -3 - (i % 3) / 10),
  };
};
const samples = lengths.map((l, i) => sample(l, i));

async function trainOnce(over: Partial<TrainerInit>) {
  const t = new Trainer({
    pretrain: model,
    learningRate: 1e-3,
    trainBatchSize: 8,
    microTrainBatchSize: 4,
    trainMaxTokensPerGpu: 40,
    ...over,
  });
  try {
    await t.ready();
    const stats = await t.train(samples);
    return { stats, weights: (await t.weights()).tensors! };
  } finally {
    t.dispose();
  }
}

const rel = (a: number, b: number): number => Math.abs(a - b) / Math.max(1e-12, Math.abs(b));

for (const [what, over] of [
  ['packingSamples', { packingSamples: true }],
  ['gradientCheckpointing', { gradientCheckpointing: true }],
  ['both', { packingSamples: true, gradientCheckpointing: true }],
] as const) {
  test(`trainer with ${what}: the padded step's loss, statistics and weights`, async () => {
    const want = await trainOnce({});
    const got = await trainOnce(over);
    assert.ok(want.stats.optimizerSteps === 1 && got.stats.optimizerSteps === 1);
    for (const k of ['policyLoss', 'entropy', 'gradNorm', 'approxKl'] as const)
      assert.ok(
        rel(got.stats[k], want.stats[k]) < 1e-5,
        `${k}: ${got.stats[k]} vs ${want.stats[k]}`,
      );
    for (const [name, w] of Object.entries(want.weights)) {
      const d = maxAbsDiff(got.weights[name]!.data, w.data);
      assert.ok(d < 1e-6, `${name}: ${d}`);
    }
  });
}

test('critic with packingSamples and checkpointing: the padded value losses over two steps', async () => {
  const critic = (packed: boolean) =>
    new Critic({
      pretrain: model,
      learningRate: 1e-2,
      trainBatchSize: 8,
      microTrainBatchSize: 4,
      packingSamples: packed,
      gradientCheckpointing: packed,
    });
  const data: CriticSample[] = samples.map((s, i) => ({
    inputIds: s.inputIds,
    actionMask: s.actionMask,
    oldValues: Array.from(s.actionMask, () => 0.1 * (i % 3)),
    returns: Array.from(s.actionMask, (_, t) => (i % 2 ? 1 : -1) * (1 + t / 20)),
  }));
  const [a, b] = [critic(false), critic(true)];
  try {
    await Promise.all([a.ready(), b.ready()]);
    for (let step = 0; step < 2; step++) {
      const [la, lb] = [(await a.train(data)).valueLoss, (await b.train(data)).valueLoss];
      assert.ok(rel(lb, la) < 1e-5, `step ${step}: ${lb} vs ${la}`);
    }
  } finally {
    a.dispose();
    b.dispose();
  }
});

test.run();
