// diagnose() names the side that limits a run, on metric series built to be limited by each side,
// and a real (tiny) run logs every metric it reads.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { diagnose, formatDiagnosis, type Diagnosis, type MetricRow } from '../../ops/diagnose.ts';
import { flagConfig, parseTrainPpoArgs } from '../../train/ppo/flags.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

/**
 * `n` steps of a run: each step's rows as train_ppo logs them (an episode row, then the update's
 * row), with `f(step)` the update's values. Step 1 is a slow warm-up the verdict must ignore.
 */
function run(n: number, f: (step: number) => Record<string, number>): MetricRow[] {
  const rows: MetricRow[] = [];
  for (let step = 1; step <= n; step++) {
    rows.push({ step, values: { tokens: 100, episodes: 16 } });
    const v = f(step);
    rows.push({
      step,
      values: step === 1 ? { ...v, step_s: v.step_s! * 20, generate_s: v.generate_s! * 20 } : v,
    });
  }
  return rows;
}

/** A sync step: generation, experience + training, weight sync, and what is left. */
const syncStep = (gen: number, train: number, sync: number, extra: Record<string, number> = {}) =>
  run(6, () => ({
    generate_s: gen,
    experience_s: 0.1 * train,
    train_s: 0.9 * train,
    weight_sync_s: sync,
    step_s: gen + train + sync + 0.01,
    ...extra,
  }));

/** An async step as the trainer sees it: its wait for a batch, its busy time, the producer's running wait. */
function asyncRun(o: {
  gen: number;
  train: number;
  sync?: number;
  wait: number;
  producerWait: number;
  publishWait?: number;
  extra?: Record<string, number>;
}): MetricRow[] {
  return run(6, (step) => ({
    generate_s: o.gen,
    experience_s: 0.1 * o.train,
    train_s: 0.9 * o.train,
    weight_sync_s: o.sync ?? 0.05,
    previous_publish_wait_s: o.publishWait ?? 0,
    trainer_wait_s: o.wait,
    producer_wait_s: o.producerWait * step,
    buffer_fill: 1,
    step_s: o.train + (o.sync ?? 0.05) + (o.publishWait ?? 0) + o.wait,
    ...o.extra,
  }));
}

const verdict = (rows: MetricRow[], settings: Record<string, string>): Diagnosis => {
  const d = diagnose(rows, settings);
  if ('reason' in d) throw new Error(d.reason);
  return d;
};
const sync8 = {
  'async-train': 'false',
  'rollout-batch-size': '8',
  'n-samples-per-prompt': '8',
  'rollout-num-engines': '1',
  'async-num-tasks': '128',
};
const async8 = { ...sync8, 'async-train': 'true', 'async-queue-size': '1' };

test('sync, generation 80% and training a real part: overlap first (--async-train)', () => {
  const d = verdict(syncStep(4, 1, 0.1), sync8);
  assert.is(d.mode, 'sync');
  assert.is(d.limit, 'rollout');
  assert.ok(Math.abs(d.share - 4 / 5.11) < 1e-9);
  assert.is(d.steps, 5, 'the warm-up step is left out');
  assert.ok(Math.abs(d.stepS - 5.11) < 1e-9);
  assert.is(d.boundS, 4);
  assert.is(d.change.flag, '--async-train');
  assert.match(d.evidence[0]!, /^sync step 5\.11 s = generate_s 4\.00 s \(78%\)/);
});

test('sync, generation almost all of it: the in-flight cap when it binds, else another engine', () => {
  const rows = syncStep(9, 0.5, 0.05, { requests_in_flight: 16, engine_idle_share: 0.05 });
  const capped = verdict(rows, { ...sync8, 'async-num-tasks': '16' });
  assert.is(capped.limit, 'rollout');
  assert.is(capped.change.flag, '--async-num-tasks');
  assert.is(capped.change.to, '64');
  assert.ok(
    capped.evidence.some((e) =>
      /requests_in_flight 16\.0 per busy engine \(64 episodes per engine a step, --async-num-tasks 16\)/.test(
        e,
      ),
    ),
  );
  const free = verdict(rows, sync8);
  assert.is(free.change.flag, '--rollout-num-engines');
  assert.is(free.change.to, '2');
});

test('sync, training dominant with heavy padding: a token budget per micro-batch', () => {
  const d = verdict(syncStep(0.3, 6, 0.1, { padding_fraction: 0.45 }), sync8);
  assert.is(d.limit, 'trainer');
  assert.is(d.change.flag, '--train-max-tokens-per-gpu');
  const lean = verdict(syncStep(0.3, 6, 0.1, { padding_fraction: 0.1 }), sync8);
  assert.is(lean.change.flag, '--actor-num-replicas');
  assert.is(lean.change.to, '2');
});

test('sync, the weight sync dominant: a larger batch pays for each sync', () => {
  const d = verdict(syncStep(0.5, 0.4, 3), sync8);
  assert.is(d.limit, 'weight sync');
  assert.is(d.change.flag, '--rollout-batch-size');
  assert.is(d.change.to, '16');
});

test('async, the trainer waits for batches: rollout-limited at the overlap bound', () => {
  const d = verdict(asyncRun({ gen: 5, train: 1, wait: 4, producerWait: 0 }), async8);
  assert.is(d.mode, 'async');
  assert.is(d.limit, 'rollout');
  assert.is(d.boundS, 5);
  assert.ok(d.attainment > 0.95 && d.attainment <= 1, `attainment ${d.attainment}`);
  assert.is(d.change.flag, '--rollout-num-engines');
});

test('async, the rollout waits for slots: trainer-limited', () => {
  const d = verdict(asyncRun({ gen: 1, train: 4, wait: 0.01, producerWait: 3 }), async8);
  assert.is(d.limit, 'trainer');
  assert.is(d.change.flag, '--actor-num-replicas');
  assert.ok(
    d.evidence[0]!.includes('the rollout waited 3.00 s for a free slot (producer_wait_s, 74%)'),
    d.evidence[0],
  );
});

test('async, the trainer waits on publishes: weight-sync-limited, partial rollout first', () => {
  const d = verdict(
    asyncRun({ gen: 1, train: 0.5, sync: 1, publishWait: 2, wait: 0.01, producerWait: 2.5 }),
    async8,
  );
  assert.is(d.limit, 'weight sync');
  assert.is(d.change.flag, '--partial-rollout');
});

test('engines idle while episodes run: the agent itself limits', () => {
  const rows = asyncRun({
    gen: 5,
    train: 1,
    wait: 4,
    producerWait: 0,
    extra: { engine_idle_share: 0.8, requests_in_flight: 1.5 },
  });
  const d = verdict(rows, async8);
  assert.is(d.limit, 'agent');
  assert.is(d.change.flag, '--rollout-batch-size', 'all 64 episodes already run at once');
  const capped = verdict(rows, { ...async8, 'async-num-tasks': '8' });
  assert.is(capped.change.flag, '--async-num-tasks');
  assert.ok(
    d.evidence.some((e) =>
      e.startsWith(
        'engine_idle_share 0.80: while episodes ran, the engines had no request in flight 80%',
      ),
    ),
  );
});

test('both sides wait on each other in turn: the queue limits', () => {
  const d = verdict(asyncRun({ gen: 2, train: 2, wait: 1, producerWait: 1 }), async8);
  assert.is(d.limit, 'queue');
  assert.is(d.change.flag, '--async-queue-size');
  assert.is(d.change.to, '2');
});

test('a run with no trained step gives a reason, not a verdict', () => {
  const d = diagnose([{ step: 1, values: { reward_mean: 0.1 } }], {});
  assert.ok('reason' in d);
});

test('a tiny real run logs what the verdict reads, and gets one', async () => {
  process.env.RTJOB_QUIET_BACKEND = '1';
  const root = mkdtempSync(join(tmpdir(), 'rtjob-diagnose-'));
  try {
    const model = await writeTinyModel(root);
    const rows: MetricRow[] = [];
    const log = {
      line: () => {},
      metric: (step: number, values: Record<string, number>) =>
        void rows.push({ step, values: { ...values } }),
    };
    const agent = fileURLToPath(new URL('../fixtures/agents/multi-turn-step.ts', import.meta.url));
    const argv = tinyRunArgs(model, join(root, 'out'), {
      'in-process': true,
      'max-steps': 3,
      'agent-func': agent,
    });
    await trainPpo(argv, {}, { log });
    const trained = rows.filter((r) => r.values.step_s !== undefined);
    assert.is(trained.length, 3);
    for (const r of trained) {
      assert.ok(
        r.values.padding_fraction! >= 0 && r.values.padding_fraction! < 1,
        'padding_fraction',
      );
    }
    const { options, given } = parseTrainPpoArgs(argv);
    const settings = Object.fromEntries(
      flagConfig(options, given).map((c) => [c.name.slice(2), c.value]),
    );
    const d = verdict(rows, settings);
    assert.is(d.steps, 2);
    assert.ok(['rollout', 'trainer', 'weight sync', 'agent'].includes(d.limit));
    assert.match(
      formatDiagnosis('j1', d),
      /^job j1: 2 step\(s\) analysed \(sync\), median step [\d.]+ s\nlimited by: /,
    );
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test.run();
