// The samples a job keeps: stored per step through the REST API, read back by step, by prompt
// and by score, and bounded per sample, per step and per job (the first step always stays).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import Database from 'better-sqlite3';

import { OpsStore, sampleLimits } from '../../ops/jobs/ops-store.ts';
import { type Ops, startOps } from '../../ops/http/ops.ts';
import { createMetricsLogger } from '../../ops/metrics.ts';

const token = 'samples-test-token-0123456789abcdef';
const dir = mkdtempSync(join(tmpdir(), 'rtjob-samples-'));
let ops: Ops;
const auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };

test.before(async () => {
  ops = await startOps({ sessionDir: dir, token, dashboardPort: 0, dashboard: false });
  ops.jobs.submit({ entrypoint: ['true'], jobId: 'j1' });
});
test.after(async () => {
  await ops.close({ stopJobs: true });
  rmSync(dir, { recursive: true, force: true });
});

const post = (body: unknown, job = 'j1') =>
  fetch(`${ops.http.url}/api/jobs/${job}/samples`, {
    method: 'POST',
    headers: auth,
    body: JSON.stringify(body),
  });
const get = async (q = '') =>
  (await fetch(`${ops.http.url}/api/jobs/j1/samples${q}`, { headers: auth })).json();

test("metrics.samples stores a step's samples; GET returns the latest step, a given step, one prompt over time, a score range", async () => {
  const logger = createMetricsLogger({ jobId: 'j1', httpAddress: ops.http.url, token });
  for (let step = 1; step <= 3; step++) {
    logger.log(step, { reward_mean: step });
    logger.samples(step, [
      { key: 'a', score: step, prompt: `a at ${step}` },
      { key: 'b', score: -step, prompt: `b at ${step}` },
    ]);
  }
  await logger.flush();
  const latest = await get();
  assert.equal(latest.steps, [1, 2, 3]);
  assert.is(latest.step, 3);
  assert.equal(
    latest.samples.map((s: { prompt: string; seq: number }) => [s.prompt, s.seq]),
    [
      ['a at 3', 0],
      ['b at 3', 1],
    ],
  );
  assert.equal(
    (await get('?step=1')).samples.map((s: { score: number }) => s.score),
    [1, -1],
  );
  const overTime = await get('?key=a');
  assert.is(overTime.step, null);
  assert.equal(
    overTime.samples.map((s: { step: number }) => s.step),
    [1, 2, 3],
  );
  assert.equal(
    (await get('?step=2&minScore=0')).samples.map((s: { key: string }) => s.key),
    ['a'],
  );
  assert.equal(
    (await get('?key=b&maxScore=-2')).samples.map((s: { step: number }) => s.step),
    [2, 3],
  );
});

test('a step posted again replaces its samples (a retry never duplicates)', async () => {
  assert.is((await post({ step: 3, samples: [{ key: 'c', score: 0 }] })).status, 200);
  assert.equal(
    (await get('?step=3')).samples.map((s: { key: string }) => s.key),
    ['c'],
  );
});

test('bad requests and samples over the limits are refused with a clear message', async () => {
  const cases: [unknown, RegExp][] = [
    [{ step: 1.5, samples: [] }, /body\.step: expected an integer/],
    [{ step: 1, samples: 'x' }, /body\.samples: expected an array/],
    [{ step: 1, samples: [[1]] }, /body\.samples\[0\]: expected an object/],
    [
      { step: 1, samples: [{ text: 'x'.repeat(sampleLimits.maxSampleBytes) }] },
      /over 65536 bytes of JSON/,
    ],
    [
      { step: 1, samples: Array.from({ length: sampleLimits.maxPerStep + 1 }, () => ({})) },
      /more than 256 items/,
    ],
  ];
  for (const [body, msg] of cases) {
    const res = await post(body);
    assert.is(res.status, 400);
    assert.match((await res.json()).message, msg);
  }
  assert.is((await post({ step: 1, samples: [] }, 'nope')).status, 404);
});

test("a job's report merges by field and gives the job page and the jobs list progress, ETA and the headline metric", async () => {
  ops.jobs.submit({ entrypoint: ['sleep', '30'], jobId: 'j3' });
  const logger = createMetricsLogger({ jobId: 'j3', httpAddress: ops.http.url, token });
  logger.report({
    config: [{ name: '--seed', value: '42', default: '42', source: 'default' }],
    headline: 'eval_accuracy',
  });
  logger.report({ totalSteps: 10 });
  const t0 = Date.now();
  logger.log(0, { eval_accuracy: 0.2 });
  await logger.flush();
  // Rows with times 1 s apart: the pace is 1 s a step.
  ops.store.addMetrics(
    'j3',
    [1, 2, 3, 4].map((step) => ({
      step,
      time: t0 + step * 1000,
      values: { reward_mean: step / 10 },
    })),
  );
  ops.store.addMetrics('j3', [{ step: 4, time: t0 + 4000, values: { eval_accuracy: 0.5 } }]);
  await fetch(`${ops.http.url}/api/jobs/j3/report`, {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({ outputs: { policy: '/tmp/p' } }),
  });
  const job = await (await fetch(`${ops.http.url}/api/jobs/j3`, { headers: auth })).json();
  assert.equal(job.report.config, [
    { name: '--seed', value: '42', default: '42', source: 'default' },
  ]);
  assert.equal(
    [job.report.totalSteps, job.report.headline, job.report.outputs.policy],
    [10, 'eval_accuracy', '/tmp/p'],
    'fields merge',
  );
  assert.equal([job.progress.step, job.progress.totalSteps], [4, 10]);
  assert.equal(job.progress.headline, { name: 'eval_accuracy', first: 0.2, last: 0.5 });
  assert.is(job.status, 'RUNNING');
  assert.ok(Math.abs(job.progress.etaMs - 6000) < 1000, `eta ${job.progress.etaMs}`);
  const list = await (await fetch(`${ops.http.url}/api/jobs`, { headers: auth })).json();
  assert.equal(list.jobs.find((j: { jobId: string }) => j.jobId === 'j3').progress.step, 4);
  const bad = await fetch(`${ops.http.url}/api/jobs/j3/report`, {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({ totalSteps: 'ten' }),
  });
  assert.is(bad.status, 400);
  await ops.jobs.stop('j3');
});

test('?maxPoints downsamples a long run on the server: first and last steps kept, bucket means between', async () => {
  ops.store.addMetrics(
    'j4',
    Array.from({ length: 1000 }, (_, step) => ({
      step,
      time: step,
      values: { x: step, y: step % 2 },
    })),
  );
  const t = await (await fetch(`${ops.http.url}/api/jobs/j1/metrics`, { headers: auth })).json();
  assert.ok(t.rows.length > 0);
  const { OpsStore } = await import('../../ops/jobs/ops-store.ts');
  const d = OpsStore.downsample(ops.store.metricsTable('j4'), 12);
  assert.is(d.rows.length, 12);
  assert.equal(d.rows[0], [0, 0, 0, 0]);
  assert.equal(d.rows.at(-1), [999, 999, 999, 1]);
  const mid = d.rows[1]!;
  assert.ok(Math.abs((mid[3] as number) - 0.5) < 0.02, 'a bucket holds the mean of its values');
  assert.ok(
    d.rows.every((r, i) => i === 0 || (r[0] as number) > (d.rows[i - 1]![0] as number)),
    'steps ascend',
  );
  ops.jobs.submit({ entrypoint: ['true'], jobId: 'j4' });
  const viaApi = await (
    await fetch(`${ops.http.url}/api/jobs/j4/metrics?maxPoints=50`, { headers: auth })
  ).json();
  assert.is(viaApi.rows.length, 50);
});

test('a job keeps at most maxPerJob samples: the oldest steps go, the first step stays', () => {
  const per = 250;
  const steps = Math.ceil(sampleLimits.maxPerJob / per) + 2;
  for (let step = 10; step < 10 + steps; step++) {
    ops.store.addSamples(
      'j2',
      step,
      Array.from({ length: per }, (_, i) => ({ key: String(i), score: i })),
    );
  }
  const kept = ops.store.sampleSteps('j2');
  assert.is(kept[0], 10, 'the first step stays');
  assert.is(kept.at(-1), 10 + steps - 1, 'the newest step stays');
  assert.ok(!kept.includes(11) && !kept.includes(12), 'the oldest steps after the first go');
  const count = (
    ops.store.db.prepare("SELECT COUNT(*) AS n FROM ops_job_samples WHERE job_id = 'j2'").get() as {
      n: number;
    }
  ).n;
  assert.ok(count <= sampleLimits.maxPerJob, `${count} rows`);
  ops.store.deleteJob('j2');
  assert.equal(ops.store.sampleSteps('j2'), [], 'deleting the job deletes its samples');
});

test('a session saved before samples had a score reads back with its rewards as scores', () => {
  // The table as the head wrote it until 2026-12: a `reward` column and `reward` fields.
  const file = join(dir, 'old-session.db');
  const old = new Database(file);
  old.exec(`CREATE TABLE ops_job_samples (job_id TEXT NOT NULL, step INTEGER NOT NULL,
    seq INTEGER NOT NULL, sample_key TEXT, reward REAL, data TEXT NOT NULL,
    PRIMARY KEY (job_id, step, seq)) WITHOUT ROWID`);
  const put = old.prepare('INSERT INTO ops_job_samples VALUES (?, ?, ?, ?, ?, ?)');
  put.run('old', 1, 0, 'a', 0.75, JSON.stringify({ key: 'a', reward: 0.75, groupRewardMean: 0.5 }));
  put.run('old', 1, 1, 'b', null, JSON.stringify({ key: 'b', prompt: 'no reward' }));
  old.close();
  const store = new OpsStore(file);
  try {
    assert.equal(store.samples('old', { minScore: 0.5 }), [
      { key: 'a', score: 0.75, groupScoreMean: 0.5, step: 1, seq: 0 },
    ]);
    assert.equal(store.samples('old', { key: 'b' }), [
      { key: 'b', prompt: 'no reward', step: 1, seq: 1 },
    ]);
  } finally {
    store.close();
  }
  // Opened again: nothing left to migrate.
  new OpsStore(file).close();
});

test.run();
