// Actors of a submitted job, end to end on a cluster started with `rtjob start --head`: the job's
// env reaches every actor (and actors of actors), actors carry the job id in the REST API, their
// stdout/stderr are indexed and outlive the worker, stop-job kills them, and the job page's config
// shows only the env worth showing.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { apiCall, pidAlive, Sandbox, until } from '../cli/helpers.ts';

const driver = fileURLToPath(new URL('./fixtures/actor-driver.ts', import.meta.url));
const sb = new Sandbox();

interface ActorRow {
  actorId: string;
  name: string | null;
  className: string;
  state: string;
  jobId: string | null;
  pid: number | null;
  deathCause: string | null;
}

test.before(async () => {
  await sb.startHead();
});
test.after(async () => {
  await sb.cleanup();
});

test('the caller env and --env reach the driver, its actors and their nested actors', async () => {
  const r = await sb.run(['submit', '--job-id', 'env1', '--', driver], {
    env: { ASYNC_NUM_TASKS: '64', MY_API_TOKEN: 'hunter2', SOME_OTHER: 'x' },
  });
  assert.is(r.code, 0, r.stderr + r.stdout);
  assert.match(r.stdout, /env=64 job=env1/);
  assert.match(r.stdout, /nested=64/);

  // Only job-relevant variables are recorded and shown; the rest are counted.
  const { body: job } = await apiCall<{ env: Record<string, string>; inheritedEnvCount: number }>(
    sb,
    'GET',
    '/api/jobs/env1',
  );
  assert.is(job.env.ASYNC_NUM_TASKS, '64');
  assert.is(job.env.MY_API_TOKEN, undefined);
  assert.is(job.env.SOME_OTHER, undefined);
  assert.ok(job.inheritedEnvCount >= 2, `inheritedEnvCount ${job.inheritedEnvCount}`);
  assert.not.match(JSON.stringify(job), /hunter2/);
});

test("a job's actors are tagged with its id, and their logs are indexed and survive them", async () => {
  const { body } = await apiCall<{ rows: ActorRow[] }>(sb, 'GET', '/api/jobs/env1/actors');
  assert.is(body.rows.length, 2);
  for (const a of body.rows) {
    assert.is(a.jobId, 'env1');
    assert.is(a.className, 'Probe');
    assert.is(a.state, 'DEAD'); // the driver exited
  }
  const all = await apiCall<{ total: number }>(sb, 'GET', '/api/actors?jobId=env1');
  assert.is(all.body.total, 2);
  const probe = body.rows.find((a) => a.name === 'probe-a')!;
  // The worker is gone; its stdout and stderr are still there.
  assert.not.ok(pidAlive(probe.pid!));
  const logs = await sb.run(['logs', 'env1', '--actor', probe.actorId]);
  assert.is(logs.code, 0, logs.stderr);
  assert.match(logs.stdout, /out: hello from probe-a/);
  assert.match(logs.stdout, /err: hello from probe-a/);
});

test('stop-job kills the actors of the job and their processes', async () => {
  const r = await sb.run([
    'submit',
    '--no-wait',
    '--job-id',
    'hold1',
    '--env',
    'MODE=hold',
    '--',
    driver,
  ]);
  assert.is(r.code, 0, r.stderr);
  await until(
    'the driver to be ready',
    async () => ((await sb.run(['logs', 'hold1'])).stdout.includes('ready') ? true : undefined),
    30_000,
  );
  const { body } = await apiCall<{ rows: ActorRow[] }>(sb, 'GET', '/api/jobs/hold1/actors');
  assert.is(body.rows.length, 2);
  assert.ok(body.rows.every((a) => a.state === 'ALIVE' && a.pid !== null));
  const pids = body.rows.map((a) => a.pid!);

  // Logs of a live actor follow its output (here: what it printed so far).
  const b = body.rows.find((a) => a.name === 'probe-b')!;
  const live = await sb.run(['logs', 'hold1', '--actor', b.actorId]);
  assert.match(live.stdout, /out: hello from probe-b\n/);

  // Workers report the calls they serve; Prometheus text counts them.
  await until('calls in /metrics', async () => {
    const m = await apiCall<string>(sb, 'GET', '/metrics');
    const n = Number(/^rtjob_actor_calls_total (\d+)/m.exec(m.body)?.[1] ?? 0);
    return n >= 3 ? true : undefined;
  });

  // `logs -f --actor` follows the live actor and returns once it is dead.
  const following = sb.run(['logs', 'hold1', '-f', '--actor', b.actorId]);
  const stop = await sb.run(['stop-job', 'hold1']);
  assert.is(stop.code, 0, stop.stderr);
  assert.match(stop.stdout, /STOPPED/);
  await until('the actors to die', async () => {
    const page = await apiCall<{ rows: ActorRow[] }>(sb, 'GET', '/api/jobs/hold1/actors');
    return page.body.rows.every((a) => a.state === 'DEAD') ? true : undefined;
  });
  await until('the worker processes to exit', () => (pids.some(pidAlive) ? undefined : true));
  const followed = await following;
  assert.is(followed.code, 0, followed.stderr);
  assert.match(followed.stdout, /out: hello from probe-b\n/);
  assert.match(followed.stdout, /err: hello from probe-b\n/);
});

test('an actor that crashes and restarts keeps the logs of every incarnation', async () => {
  const r = await sb.run(['submit', '--job-id', 'crash1', '--env', 'MODE=crash', '--', driver]);
  assert.is(r.code, 0, r.stderr + r.stdout);
  const actorId = /crasher (\S+)/.exec(r.stdout)![1]!;
  const logs = await sb.run(['logs', 'crash1', '--actor', actorId]);
  assert.match(
    logs.stdout,
    /out: first life\n[\s\S]*about to crash[\s\S]*crashing now\n[\s\S]*--- restart 1 \(incarnation 2\) ---\nout: second life/,
  );
  const { body } = await apiCall<{ restarts: number }>(sb, 'GET', `/api/actors/${actorId}`);
  assert.is(body.restarts, 1);
});

test("with --working-dir, actors run in the job's directory too", async () => {
  const dir = join(sb.home, 'wd');
  mkdirSync(dir);
  writeFileSync(join(dir, 'data.txt'), 'from the working dir');
  const r = await sb.run(['submit', '--working-dir', dir, '--env', 'MODE=cwd', '--', driver]);
  assert.is(r.code, 0, r.stderr + r.stdout);
  assert.match(r.stdout, /actor read: from the working dir/);
});

test('--actor takes the name the dashboard shows; an unknown one lists the job’s actors', async () => {
  const byName = await sb.run(['logs', 'env1', '--actor', 'probe-a']);
  assert.is(byName.code, 0, byName.stderr);
  assert.match(byName.stdout, /out: hello from probe-a/);
  const r = await sb.run(['logs', 'env1', '--actor', 'actor_nope']);
  assert.is(r.code, 2);
  assert.match(
    r.stderr,
    /job env1 has no actor 'actor_nope'; its actors: nested-of-\d+, probe-a$/m,
    r.stderr,
  );
});

test.run();
