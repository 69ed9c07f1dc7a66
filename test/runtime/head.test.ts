import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  type ActorInfo,
  type LocalCluster,
  actorInfo,
  defineActor,
  init,
  shutdown,
  startLocalCluster,
} from '../../runtime/index.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { acceptedBy } from '../../runtime/protocol.ts';
import { connect } from '../../runtime/transport.ts';
import { fixture, rejection, until } from './helpers.ts';

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');
let cluster: LocalCluster;
let dir: string;
const events: ActorInfo[] = [];

test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'rtjob-head-'));
  cluster = await startLocalCluster({
    sessionDir: dir,
    head: { sessionDir: dir },
    node: { numCpus: 2 },
  });
  cluster.head.on('actor', (a) => events.push(a));
  await init({ address: cluster.address, token: cluster.token });
});
test.after(async () => {
  await shutdown();
  await cluster.close();
  rmSync(dir, { recursive: true, force: true });
});

test('the head reports actor state changes as events and lists', async () => {
  const c = CounterActor.options({ name: 'watched' }).remote(1);
  assert.is(await c.incr.remote(1), 2);
  const id = (await actorInfo(c)).actorId;
  const states = events.filter((e) => e.actorId === id).map((e) => e.state);
  assert.is(states[0], 'PENDING');
  assert.ok(states.includes('ALIVE'));
  assert.ok(cluster.head.listActors().some((a) => a.actorId === id && a.name === 'watched'));
  assert.is(cluster.head.listNodes()[0]!.state, 'ALIVE');
  cluster.head.killActor(id);
  await until(() => events.some((e) => e.actorId === id && e.state === 'DEAD'), 5000, 'DEAD event');
  assert.is((await rejection(c.get.remote())).code, 'ACTOR_DIED');
});

test('the head takes from each kind of peer only what the protocol routes allow it to send', async () => {
  const conn = await connect(cluster.address, {
    token: cluster.token,
    accepts: acceptedBy('worker'),
    handler: () => undefined,
  });
  try {
    await conn.request({ type: 'registerClient', kind: 'driver', pid: process.pid });
    // fetchPackage is for node agents: a driver gets a protocol error and keeps its connection.
    const wrong = await conn.request({ type: 'fetchPackage', hash: 'a'.repeat(64) }).then(
      () => undefined,
      (e: { code?: string; message: string }) => e,
    );
    assert.is(wrong?.code, 'PROTOCOL');
    assert.match(wrong!.message, /not for a driver/);
    const again = await conn
      .request({
        type: 'registerNode',
        hostname: 'x',
        host: '127.0.0.1',
        pid: 1,
        resources: { CPU: 1 },
        sessionDir: dir,
      })
      .catch((e: { code?: string }) => e);
    assert.is(
      (again as { code?: string }).code,
      'INVALID_ARGUMENT',
      'registering twice is refused',
    );
    assert.is(
      await conn.request({ type: 'kvGet', key: 'nothing-here' }),
      null,
      'the connection still serves',
    );
  } finally {
    conn.close('test done');
  }
  // Anything but registering first closes the connection.
  const early = await connect(cluster.address, { token: cluster.token, handler: () => undefined });
  const closed = new Promise<string>((resolve) => early.onClose(resolve));
  early.send({ type: 'kvGet', rid: 1, key: 'x' });
  assert.match(await closed, /before registering/);
  assert.ok(acceptedBy('head').has('fetchPackage') && !acceptedBy('head').has('startWorker'));
  assert.ok(
    acceptedBy('node').has('startWorker') &&
      acceptedBy('worker').has('stopWorker') &&
      acceptedBy('data').has('call'),
  );
});

test('head state is kept in SQLite in the session dir; worker logs beside it', async () => {
  assert.ok(existsSync(join(dir, 'head.sqlite')));
  const rows = cluster.head.store.listActors();
  assert.ok(rows.some((a) => a.name === 'watched' && a.state === 'DEAD'));
  cluster.head.store.kvPut('test/key', new Uint8Array([1, 2, 3]));
  assert.equal(Array.from(cluster.head.store.kvGet('test/key')!), [1, 2, 3]);
  assert.equal(cluster.head.store.kvKeys('test/'), ['test/key']);
  const c = CounterActor.remote(0);
  await c.dieWith.remote('to the log', 1).catch(() => {});
  const id = (await actorInfo(c)).actorId;
  const logFile = join(dir, 'logs', `worker-${id}-1.err`);
  await until(() => existsSync(logFile), 5000, 'worker stderr log');
});

test.run();
