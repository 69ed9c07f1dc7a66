/**
 * Data-parallel trainers: two Trainer actors in a collective group split the micro-batches of
 * each step, all-reduce gradients and stay bit-identical; their step matches one trainer's on the
 * same data; they recompute old logprobs once between them (each its share, every row on both);
 * a rank that dies makes the other's step fail with a typed error instead of hanging;
 * train_ppo runs with --actor-num-replicas / --critic-num-replicas 2.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Trainer, type TrainStats } from '../../roles/trainer.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { defineActor, init, kill, listActors, shutdown } from '../../runtime/index.ts';
import type { ActorInfo } from '../../runtime/protocol.ts';
import { isRtjobError } from '../../runtime/errors.ts';
import { tinyTrainSample, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-dp-'));
let model = '';
const TrainerActor = defineActor<typeof Trainer>(
  new URL('../../roles/trainer.ts', import.meta.url),
  'Trainer',
);

test.before(async () => {
  model = await writeTinyModel(root);
  // Two GPUs in the node's resources only (the ranks train on the CPU backend): enough to place
  // OpenRLHF's `--actor-num-gpus-per-node 2` as two ranks of one GPU each.
  await init({ address: 'local', local: { node: { numCpus: 4, numGpus: 2 } } });
});
test.after(async () => {
  await shutdown();
  rmSync(root, { recursive: true, force: true });
});

const samples = Array.from({ length: 12 }, (_, i) => tinyTrainSample(6 + (i % 5), i));
const init0 = { learningRate: 1e-2, trainBatchSize: 12, microTrainBatchSize: 2 };
const bits = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

test('two ranks split the micro-batches, stay bit-identical, and match one trainer on the same data', async () => {
  const group = `dp-${Date.now()}`;
  const ranks = [0, 1].map((rank) =>
    TrainerActor.remote({ pretrain: model, ...init0, dataParallel: { group, rank, worldSize: 2 } }),
  );
  try {
    await Promise.all(ranks.map((r) => r.ready.remote()));
    const stats = await Promise.all(ranks.map((r) => r.train.remote(samples)));
    const again = await Promise.all(ranks.map((r) => r.train.remote(samples.slice(0, 8))));
    // From the third step on, each rank cuts its share with the cost model learnt from the
    // timings of the first two: every rank must still cut alike (same shares, same weights).
    const third = await Promise.all(ranks.map((r) => r.train.remote(samples)));
    // Timings are each rank's own; everything else is all-reduced.
    const reduced = ({ timing: _, ...rest }: TrainStats) => rest;
    assert.equal(reduced(stats[0]!), reduced(stats[1]!), 'both ranks report the same statistics');
    assert.equal(reduced(again[0]!), reduced(again[1]!));
    assert.equal(reduced(third[0]!), reduced(third[1]!));
    assert.is(stats[0]!.timing.computeMs, stats[1]!.timing.computeMs, 'the slowest rank, on both');
    assert.ok(stats[0]!.timing.imbalanceMs >= 0 && stats[0]!.timing.allreduceMs >= 0);
    const ws = await Promise.all(ranks.map((r) => r.weights.remote()));
    const w0 = { tensors: ws[0]!.tensors! };
    const w1 = { tensors: ws[1]!.tensors! };
    assert.equal(Object.keys(w0.tensors).sort(), Object.keys(w1.tensors).sort());
    for (const name of Object.keys(w0.tensors)) {
      assert.ok(
        bits(w0.tensors[name]!.data as Float32Array).equals(
          bits(w1.tensors[name]!.data as Float32Array),
        ),
        `${name} is bit-identical on both ranks`,
      );
    }
    const alone = new Trainer({ pretrain: model, ...init0 });
    try {
      await alone.ready();
      const one = await alone.train(samples);
      const close = (a: number, b: number, what: string) =>
        assert.ok(Math.abs(a - b) <= 1e-5 + 1e-4 * Math.abs(b), `${what}: ${a} vs ${b}`);
      close(stats[0]!.policyLoss, one.policyLoss, 'loss');
      close(stats[0]!.gradNorm, one.gradNorm, 'grad norm');
      close(stats[0]!.clipFraction, one.clipFraction, 'clip fraction');
      close(stats[0]!.entropy, one.entropy, 'entropy');
      assert.is(stats[0]!.tokens, one.tokens);
    } finally {
      alone.dispose();
    }
  } finally {
    await Promise.all(ranks.map((r) => kill(r)));
  }
});

test('two ranks recompute old logprobs once between them: each its share, both every row', async () => {
  const group = `dp-old-${Date.now()}`;
  const ranks = [0, 1].map((rank) =>
    TrainerActor.remote({ pretrain: model, ...init0, dataParallel: { group, rank, worldSize: 2 } }),
  );
  const seqs = samples.map((s) => Array.from(s.inputIds));
  try {
    await Promise.all(ranks.map((r) => r.ready.remote()));
    const rows = await Promise.all(ranks.map((r) => r.oldLogprobs.remote(seqs)));
    assert.equal(rows[0], rows[1], 'every row on both ranks, the same values');
    const shares = await Promise.all(ranks.map((r) => r.getRecomputedRows.remote()));
    assert.equal(shares, [6, 6], 'each rank computed half of the 12 rows');
    const alone = new Trainer({ pretrain: model, ...init0 });
    try {
      await alone.ready();
      const want = await alone.logprobs(seqs);
      assert.equal(
        rows[0]!.map((r) => r.length),
        want.map((r) => r.length),
      );
      rows[0]!.forEach((row, i) =>
        row.forEach((v, t) =>
          assert.ok(
            Math.abs(v - want[i]![t]!) < 1e-5,
            `row ${i} token ${t}: ${v} vs ${want[i]![t]}`,
          ),
        ),
      );
    } finally {
      alone.dispose();
    }
  } finally {
    await Promise.all(ranks.map((r) => kill(r)));
  }
});

test("a rank that dies makes the other rank's step fail with a typed error, not hang", async () => {
  const group = `dp-dead-${Date.now()}`;
  const ranks = [0, 1].map((rank) =>
    TrainerActor.remote({
      pretrain: model,
      ...init0,
      dataParallel: { group, rank, worldSize: 2, timeoutMs: 20_000 },
    }),
  );
  try {
    await Promise.all(ranks.map((r) => r.ready.remote()));
    await kill(ranks[1]!);
    const err = await ranks[0]!.train.remote(samples).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(err, 'the step failed');
    assert.ok(
      isRtjobError(err, 'COLLECTIVE') || /collective group/.test(String((err as Error).message)),
      String(err),
    );
  } finally {
    await Promise.all(ranks.map((r) => kill(r).catch(() => {})));
  }
});

/** A tiny gae run of the parity agent writing to one place, so a later run can resume it. */
const tinyGae = (extra: string[]): string[] => [
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
  join(root, 'ppo-out'),
  '--ckpt-path',
  join(root, 'ppo-ckpt'),
  ...extra,
];

test('train_ppo with 2 trainer and 2 critic ranks trains (gae), and resumes with 1 rank', async () => {
  const rows: Record<string, number>[] = [];
  let ranks: ActorInfo[] = [];
  const log = {
    line: () => {},
    metric: (step: number, v: Record<string, number>) => {
      rows.push(v);
      if (step === 1 && !ranks.length)
        void listActors().then(
          (a) =>
            (ranks = a.filter(
              (x) => x.state === 'ALIVE' && ['Trainer', 'Critic'].includes(x.spec.exportName),
            )),
        );
    },
  };
  const s = await trainPpo(
    tinyGae([
      // OpenRLHF's spelling: one node × 2 GPUs is two ranks of one GPU (--actor-num-replicas 2).
      '--actor-num-nodes',
      '1',
      '--actor-num-gpus-per-node',
      '2',
      '--critic-num-gpus-per-node',
      '2',
      '--rollout-num-engines',
      '2',
      '--colocate-all-models',
      '--max-steps',
      '2',
      '--save-steps',
      '1',
    ]),
    {},
    { log },
  );
  assert.is(s.steps, 2);
  assert.equal(ranks.map((a) => a.spec.exportName).sort(), [
    'Critic',
    'Critic',
    'Trainer',
    'Trainer',
  ]);
  // Colocated: rank i shares GPU i's bundle with rollout i and the other role's rank i.
  assert.ok(ranks.every((a) => (a.options.resources.GPU ?? 0) > 0 && a.options.bundleIndex! < 2));
  const steps = rows.filter((r) => r.policy_loss !== undefined);
  assert.is(steps.length, 2);
  assert.ok(steps.every((r) => Number.isFinite(r.policy_loss!) && Number.isFinite(r.value_loss!)));
  // Every rank holds the same state, so a checkpoint of 2 ranks resumes on 1.
  const resumed = await trainPpo(
    tinyGae(['--in-process', '--max-steps', '3', '--load-checkpoint']),
    {},
    { log: { line: () => {}, metric: () => {} } },
  );
  assert.is(resumed.steps, 3);
  assert.equal(
    resumed.trainedPrompts.slice(0, 8),
    s.trainedPrompts,
    'the resumed run continues where the 2-rank run stopped',
  );
});

test.run();
