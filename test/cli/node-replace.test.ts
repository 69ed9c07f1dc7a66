// D7: the node agent next to a live head dies (kill -9); `rtjob start --head` starts a new one in
// its place (the head keeps running) and actors run again.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { pidAlive, Sandbox, until } from './helpers.ts';

const fixtures = fileURLToPath(new URL('../ops/fixtures/', import.meta.url));
const sb = new Sandbox({ RTJOB_NODE_TIMEOUT_MS: '2000' });

test.after(async () => {
  await sb.cleanup();
});

test('a dead node agent is replaced in place while the head lives', async () => {
  await sb.startHead();
  const [headPid, nodePid] = sb.clusterFile().pids as [number, number];
  process.kill(nodePid, 'SIGKILL');
  await until('the node agent to die', () => (pidAlive(nodePid) ? undefined : true));

  const r = await sb.run(['start', '--head']);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /node agent replaced/);
  const pids = sb.clusterFile().pids;
  assert.is(pids[0], headPid, 'the same head');
  assert.ok(pidAlive(pids[1]!) && pids[1] !== nodePid, 'a new node agent');

  const job = await sb.run(['submit', '--', join(fixtures, 'actor-driver.ts')], {
    timeoutMs: 90_000,
  });
  assert.is(job.code, 0, job.stderr);
  assert.match(job.stdout, /nested=/, job.stdout);
});

test.run();
