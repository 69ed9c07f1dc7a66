// Head recovery: kill -9 the head while a job runs, start it again on the same session dir; the
// job table and history are intact, the running driver is re-adopted, and it finishes normally;
// the node agent and the workers reconnect, and a running actor keeps its state.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { apiCall, pidAlive, Sandbox, until } from './helpers.ts';

const fixtures = fileURLToPath(new URL('../ops/fixtures/', import.meta.url));
// A short node timeout is also a short recovery window: actors not re-attached by then are lost.
const sb = new Sandbox({ RTJOB_NODE_TIMEOUT_MS: '3000' });
const actorDriver = join(fixtures, 'actor-driver.ts');

test.after(async () => {
  await sb.cleanup();
});

test('a head killed with SIGKILL recovers its jobs and re-adopts the running driver', async () => {
  await sb.startHead();
  const pidFile = join(sb.home, 'driver.pid');
  const done = await sb.run(['submit', '--job-id', 'before', '--', join(fixtures, 'echo-env.ts')]);
  assert.is(done.code, 0, done.stderr);
  const r = await sb.run([
    'submit',
    '--no-wait',
    '--job-id',
    'long',
    '--env',
    'TICKS=200',
    '--env',
    `PID_FILE=${pidFile}`,
    '--',
    join(fixtures, 'sleeper.ts'),
  ]);
  assert.is(r.code, 0, r.stderr);
  const driver = await until('the driver', () => {
    try {
      return Number(readFileSync(pidFile, 'utf8')) || undefined;
    } catch {
      return undefined;
    }
  });
  const oldHead = sb.clusterFile().pids[0]!;
  process.kill(oldHead, 'SIGKILL');
  await until('the old head to die', () => (pidAlive(oldHead) ? undefined : true));
  assert.ok(pidAlive(driver), 'the driver outlives the head');

  await sb.startHead();
  assert.is.not(sb.clusterFile().pids[0], oldHead);
  const list = await sb.run(['list', '--json']);
  assert.is(list.code, 0, list.stderr);
  const jobs = JSON.parse(list.stdout) as { jobId: string; status: string }[];
  assert.is(jobs.find((j) => j.jobId === 'before')?.status, 'SUCCEEDED');
  assert.is(jobs.find((j) => j.jobId === 'long')?.status, 'RUNNING');

  // The re-adopted driver finishes and its real exit code is recorded.
  const end = await until(
    'the job to finish',
    async () => {
      const j = await apiCall<{ status: string; exitCode: number }>(sb, 'GET', '/api/jobs/long');
      return j.body.status === 'RUNNING' ? undefined : j.body;
    },
    30_000,
  );
  assert.is(end.status, 'SUCCEEDED');
  assert.is(end.exitCode, 0);
  const logs = await sb.run(['logs', 'long']);
  assert.match(logs.stdout, /tick 0\n[\s\S]*tick 199\ndone/);
});

test('actors keep their state across a head restart; node agent, workers and driver reconnect', async () => {
  const stopFile = join(sb.home, 'stop-counting');
  const r = await sb.run([
    'submit',
    '--no-wait',
    '--job-id',
    'count',
    '--env',
    'MODE=count',
    '--env',
    `STOP_FILE=${stopFile}`,
    '--',
    actorDriver,
  ]);
  assert.is(r.code, 0, r.stderr);
  const counted = async () => {
    const lines = (await sb.run(['logs', 'count'])).stdout.match(/count \d+ pid \d+/g) ?? [];
    return lines.map((l) => l.split(' ').map(Number)).map(([, n, , pid]) => ({ n: n!, pid: pid! }));
  };
  await until(
    'a few counts',
    async () => ((await counted()).length >= 5 ? true : undefined),
    30_000,
  );
  const { body: before } = await apiCall<{
    rows: { actorId: string; pid: number; state: string }[];
  }>(sb, 'GET', '/api/jobs/count/actors');
  assert.is(before.rows.length, 1);
  const worker = before.rows[0]!;
  const nodeAgents = sb.clusterFile().pids.slice(1);

  const oldHead = sb.clusterFile().pids[0]!;
  process.kill(oldHead, 'SIGKILL');
  await until('the old head to die', () => (pidAlive(oldHead) ? undefined : true));
  assert.ok(pidAlive(worker.pid), 'the worker outlives the head');
  const restartedAt = Date.now();
  await sb.startHead();
  assert.equal(sb.clusterFile().pids.slice(1), nodeAgents, 'the running node agent is kept');

  // Within seconds: the node is back, the actor ALIVE on the same process, the job RUNNING.
  const status = await until(
    'status to be correct again',
    async () => {
      const s = JSON.parse((await sb.run(['status', '--json'])).stdout) as {
        nodes: { state: string; workers: number }[];
        actorsByState: Record<string, number>;
      };
      return s.nodes.some((n) => n.state === 'ALIVE' && n.workers >= 1) ? s : undefined;
    },
    15_000,
  );
  const tookMs = Date.now() - restartedAt;
  console.log(
    `status correct ${tookMs} ms after \`rtjob start --head\` began (head restart included)`,
  );
  assert.ok(tookMs < 15_000);
  assert.ok((status.actorsByState.ALIVE ?? 0) >= 1);
  const { body: after } = await apiCall<{ actorId: string; pid: number; state: string }>(
    sb,
    'GET',
    `/api/actors/${worker.actorId}`,
  );
  assert.is(after.state, 'ALIVE');
  assert.is(after.pid, worker.pid);

  // Past the recovery window the actor is still alive (its owner, the driver, reconnected).
  await new Promise((r2) => setTimeout(r2, 3500));
  const { body: later } = await apiCall<{ state: string }>(
    sb,
    'GET',
    `/api/actors/${worker.actorId}`,
  );
  assert.is(later.state, 'ALIVE');
  writeFileSync(stopFile, '');
  const end = await until(
    'the job to finish',
    async () => {
      const j = await apiCall<{ status: string; message: string }>(sb, 'GET', '/api/jobs/count');
      return j.body.status === 'RUNNING' ? undefined : j.body;
    },
    30_000,
  );
  assert.is(end.status, 'SUCCEEDED', end.message);
  // The counter never went back: one process, one count per call, in order.
  const counts = await counted();
  assert.ok(
    counts.every((c, i) => c.n === i + 1 && c.pid === worker.pid),
    'the count runs 1, 2, 3, … on one process',
  );
  // The driver created an actor through the new head.
  assert.match((await sb.run(['logs', 'count'])).stdout, /late actor says 1/);
});

test('placement groups survive a head restart: same bundles, resources still held, new actors placed in them', async () => {
  type Pg = { pgId: string; state: string; bundleNodes?: string[] };
  type Nodes = {
    nodes: { nodeId: string; state: string; resourcesAvailable: Record<string, number> }[];
  };
  const freeCpu = async () =>
    (await apiCall<Nodes>(sb, 'GET', '/api/nodes')).body.nodes.find((n) => n.state === 'ALIVE')!
      .resourcesAvailable.CPU!;
  const bundleCpu = (await freeCpu()) / 2;
  const stopFile = join(sb.home, 'stop-pg');
  const r = await sb.run([
    'submit',
    '--no-wait',
    '--job-id',
    'pg',
    '--env',
    'MODE=pg',
    '--env',
    `BUNDLE_CPU=${bundleCpu}`,
    '--env',
    `STOP_FILE=${stopFile}`,
    '--',
    actorDriver,
  ]);
  assert.is(r.code, 0, r.stderr);
  const pgId = await until(
    'the group and its first actor',
    async () => /pg (\S+) first says 1/.exec((await sb.run(['logs', 'pg'])).stdout)?.[1],
    30_000,
  );
  const { body: before } = await apiCall<Pg>(sb, 'GET', `/api/placement-groups/${pgId}`);
  assert.is(before.state, 'CREATED');
  assert.is(before.bundleNodes?.length, 2);
  assert.is(await freeCpu(), 0, 'both bundles hold their CPUs');

  const oldHead = sb.clusterFile().pids[0]!;
  process.kill(oldHead, 'SIGKILL');
  await until('the old head to die', () => (pidAlive(oldHead) ? undefined : true));
  await sb.startHead();

  const after = await until(
    'the group to be restored',
    async () => {
      const res = await apiCall<Pg>(sb, 'GET', `/api/placement-groups/${pgId}`);
      return res.status === 200 && res.body.state === 'CREATED' ? res.body : undefined;
    },
    15_000,
  );
  assert.equal(after.bundleNodes, before.bundleNodes, 'each bundle on the node it had');
  assert.is(
    await freeCpu(),
    0,
    'the restored bundles hold their CPUs again (and the running actor is not counted twice)',
  );

  writeFileSync(stopFile, '');
  const end = await until(
    'the job to finish',
    async () => {
      const j = await apiCall<{ status: string; message: string }>(sb, 'GET', '/api/jobs/pg');
      return j.body.status === 'RUNNING' ? undefined : j.body;
    },
    30_000,
  );
  assert.is(end.status, 'SUCCEEDED', end.message);
  // A new actor went into bundle 1 on the bundle's node; the first kept its state.
  assert.match(
    (await sb.run(['logs', 'pg'])).stdout,
    new RegExp(`second says 1 on ${before.bundleNodes![1]}; first says 2`),
  );
});

test('rtjob stop with a dead head still stops its drivers and node agent: no orphans', async () => {
  const pidFile = join(sb.home, 'orphan.pid');
  const r = await sb.run([
    'submit',
    '--no-wait',
    '--job-id',
    'orphan',
    '--env',
    `PID_FILE=${pidFile}`,
    '--',
    join(fixtures, 'sleeper.ts'),
  ]);
  assert.is(r.code, 0, r.stderr);
  const driver = await until('the driver', () => {
    try {
      return Number(readFileSync(pidFile, 'utf8')) || undefined;
    } catch {
      return undefined;
    }
  });
  const [head, ...nodes] = sb.clusterFile().pids;
  process.kill(head!, 'SIGKILL');
  await until('the head to die', () => (pidAlive(head!) ? undefined : true));
  const stop = await sb.run(['stop']);
  assert.is(stop.code, 0, stop.stderr);
  assert.match(stop.stdout, /stopped 1 job driver left by the dead head/);
  for (const pid of [driver, ...nodes])
    assert.not.ok(pidAlive(pid), `pid ${pid} survived rtjob stop`);
});

test.run();
