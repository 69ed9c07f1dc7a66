// Head recovery: kill -9 the head while a job runs, start it again on the same session dir; the
// job table and history are intact, the running driver is re-adopted, and it finishes normally.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { apiCall, pidAlive, Sandbox, until } from './helpers.ts';

const fixtures = fileURLToPath(new URL('../ops/fixtures/', import.meta.url));
const sb = new Sandbox();

test.after(async () => {
  await sb.cleanup();
});

test('a head killed with SIGKILL recovers its jobs and re-adopts the running driver', async () => {
  await sb.startHead();
  const pidFile = join(sb.home, 'driver.pid');
  const done = await sb.run(['submit', '--job-id', 'before', '--', join(fixtures, 'echo-env.ts')]);
  assert.is(done.code, 0, done.stderr);
  const r = await sb.run(['submit', '--no-wait', '--job-id', 'long', '--env', 'TICKS=60', '--env', `PID_FILE=${pidFile}`, '--', join(fixtures, 'sleeper.ts')]);
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
  const end = await until('the job to finish', async () => {
    const j = await apiCall<{ status: string; exitCode: number }>(sb, 'GET', '/api/jobs/long');
    return j.body.status === 'RUNNING' ? undefined : j.body;
  }, 30_000);
  assert.is(end.status, 'SUCCEEDED');
  assert.is(end.exitCode, 0);
  const logs = await sb.run(['logs', 'long']);
  assert.match(logs.stdout, /tick 0\n[\s\S]*tick 59\ndone/);
});

test.run();
