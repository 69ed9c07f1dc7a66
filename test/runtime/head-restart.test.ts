/**
 * Drivers and handles outlive a head restart: a plain `init()` driver reconnects by default and
 * keeps its actors (D5), a handle whose actor died while the head was down finds the restarted
 * incarnation (D4), and a driver that loses the head for good sees `ActorDiedError` with cause
 * `owner-died`, not a connection error.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { type Head, startHead } from '../../runtime/head/head.ts';
import { actorInfo, defineActor, init, shutdown } from '../../runtime/index.ts';
import { setLogSink } from '../../runtime/log.ts';
import { type NodeAgent, startNodeAgent } from '../../runtime/node/agent.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { alive, fixture, rejection, until } from './helpers.ts';

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');
const recoveryMs = 1500;
let dir: string;
let head: Head;
let node: NodeAgent;
let port: number;
const token = 'head-restart-token';

const startOurHead = (p: number) =>
  startHead({
    port: p,
    token,
    sessionDir: dir,
    nodeHeartbeatTimeoutMs: recoveryMs,
    heartbeatIntervalMs: 200,
  });

test.before(async () => {
  setLogSink((l, c, m) => process.env.DEBUG_LOG && console.error(c, l, m));
  dir = mkdtempSync(join(tmpdir(), 'rtjob-restart-'));
  head = await startOurHead(0);
  port = head.port;
  node = await startNodeAgent({
    headAddress: head.address,
    token,
    sessionDir: dir,
    numCpus: 4,
    reconnectMs: 60_000,
  });
  // A plain driver: no RTJOB_HEAD_RECONNECT_MS, no options.
  delete process.env.RTJOB_HEAD_RECONNECT_MS;
  await init({ address: head.address, token });
});
test.after(async () => {
  await shutdown();
  await node.close();
  await head.close();
  rmSync(dir, { recursive: true, force: true });
});

test('D5: a plain init() driver reconnects to a restarted head and keeps its actors', async () => {
  const c = CounterActor.remote(0);
  assert.is(await c.incr.remote(1), 1);
  await head.close();
  head = await startOurHead(port);
  // Past the recovery window: an owner that did not come back would have lost its actors now.
  await new Promise((r) => setTimeout(r, recoveryMs + 500));
  assert.is(await c.incr.remote(1), 2, 'same actor, same state');
  assert.is((await actorInfo(c)).state, 'ALIVE');
});

test('D4: a handle whose actor died during a head outage calls the restarted incarnation', async () => {
  const c = CounterActor.options({ maxRestarts: 1 }).remote(0);
  assert.is(await c.incr.remote(1), 1);
  const pid = await c.pid.remote();
  await head.close();
  process.kill(pid, 'SIGKILL');
  await until(() => !alive(pid), 5000, 'worker gone');
  // Made while the head is down: it waits for the head instead of failing the handle for good.
  const during = c.incr.remote(1).then(
    (v) => v,
    (e: unknown) => (e as { code?: string }).code,
  );
  head = await startOurHead(port);
  const first = await during;
  assert.ok(
    first === 1 || first === 'ACTOR_DIED',
    `the call made during the outage: ${String(first)}`,
  );
  for (let i = 0; i < 5; i++) assert.type(await c.incr.remote(1), 'number');
  const info = await actorInfo(c);
  assert.is(info.state, 'ALIVE');
  assert.is(info.numRestarts, 1);
});

test('a driver that loses the head for good sees ActorDiedError (owner-died), not CONNECTION', async () => {
  await shutdown();
  await init({ address: head.address, token, headReconnectMs: 0 });
  const c = CounterActor.remote(0);
  assert.is(await c.incr.remote(1), 1);
  const pid = await c.pid.remote();
  await head.close();
  process.kill(pid, 'SIGKILL');
  const e = await rejection(c.incr.remote(1));
  assert.is(e.code, 'ACTOR_DIED');
  assert.is(e.context?.reason, 'owner-died');
  head = await startOurHead(port);
});

test.run();
