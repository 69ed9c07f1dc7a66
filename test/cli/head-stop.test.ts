// The operator's view of a head that goes away (G22): `rtjob stop` on the head names the node
// agents that joined it and keep running; `rtjob dashboard` does not link a head that is dead.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { binPath, pidAlive, Sandbox, until } from './helpers.ts';

const head = new Sandbox();
const other = new Sandbox();

test.after(async () => {
  await other.cleanup();
  await head.cleanup();
});

test('rtjob stop on the head names the joined node agent that keeps running', async () => {
  await head.startHead();
  const { address, token } = head.clusterFile();
  const joined = await other.run(['start', '--address', address, '--token', token]);
  assert.is(joined.code, 0, joined.stderr);
  await until('the joined node on the head', async () => {
    const s = await head.run(['status', '--json']);
    return JSON.parse(s.stdout).nodes.length === 2 ? true : undefined;
  });
  const stopped = await head.run(['stop']);
  assert.is(stopped.code, 0, stopped.stderr);
  const lines = stopped.stdout.trim().split('\n');
  assert.match(lines[0]!, /^stopped the cluster \(\d processes\)$/);
  assert.match(
    lines[1]!,
    new RegExp(
      `^1 joined node agent keeps running, waiting for a head at ${address}: \\S+ \\(\\S+\\); \`rtjob stop\` on its machine stops it$`,
    ),
  );
  // It does keep running, until stopped where it was started.
  assert.ok(other.clusterFile().pids.some(pidAlive));
  const otherStop = await other.run(['stop']);
  assert.match(otherStop.stdout, /^stopped this machine's node agent \(joined to /);
});

test('rtjob dashboard with the head dead says so and serves the run history instead', async () => {
  await head.startHead();
  const { headPid, dashboardUrl } = head.clusterFile();
  process.kill(headPid!, 'SIGKILL');
  await until('the head to die', () => (pidAlive(headPid!) ? undefined : true));
  const child = spawn(process.execPath, [binPath, 'dashboard', '--port', '0'], {
    env: { ...process.env, HOME: head.home, RTJOB_HOME: join(head.home, '.rtjob') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  const exited = new Promise((r) => child.on('exit', r));
  try {
    const link = await until('the read-only link', () => /(http:\/\/\S+)/.exec(out)?.[1], 60_000);
    assert.not.ok(link.startsWith(dashboardUrl), `links the dead head: ${link}`);
    assert.match(
      err,
      new RegExp(
        `^no head answers at ${dashboardUrl} \\(.+\\): on its machine, \`rtjob start --head\` starts it again; serving the run history read-only meanwhile\\n`,
      ),
    );
  } finally {
    child.kill('SIGINT');
  }
  assert.is(await exited, 0);
});

test.run();
