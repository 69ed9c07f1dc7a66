import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { WebSocket } from 'ws';
import { type ClusterInfo, actorInfo, defineActor, init, shutdown } from '../../runtime/index.ts';
import { setLogSink } from '../../runtime/log.ts';
import { messageTypes, pack } from '../../runtime/protocol.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { fixture } from './helpers.ts';

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');
let cluster: ClusterInfo;
let seed = 12345;
const rand = () => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed / 0x7fffffff;
};
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;

function randomValue(depth = 0): unknown {
  const kinds = depth > 2 ? 5 : 8;
  switch (Math.floor(rand() * kinds)) {
    case 0:
      return Math.floor(rand() * 1e6) - 5e5;
    case 1:
      return rand().toString(36).slice(2);
    case 2:
      return null;
    case 3:
      return rand() > 0.5;
    case 4:
      return new Uint8Array(Math.floor(rand() * 64));
    case 5:
      return Array.from({ length: Math.floor(rand() * 4) }, () => randomValue(depth + 1));
    case 6: {
      const o: Record<string, unknown> = {};
      for (let i = 0; i < 4; i++)
        o[pick(['rid', 'actorId', 'method', 'args', 'options', 'spec', 'x'])] = randomValue(
          depth + 1,
        );
      return o;
    }
    default:
      return new Float32Array(Math.floor(rand() * 8));
  }
}

/** One random frame: raw bytes, a random value, or a real message type with random fields. */
function randomFrame(): Buffer | string {
  const r = rand();
  if (r < 0.2)
    return Buffer.from(
      Array.from({ length: 1 + Math.floor(rand() * 200) }, () => Math.floor(rand() * 256)),
    );
  if (r < 0.25) return 'text frame';
  if (r < 0.4) return pack(randomValue());
  const msg: Record<string, unknown> = {
    type: pick([...messageTypes]),
    rid: Math.floor(rand() * 100),
  };
  for (const k of [
    'actorId',
    'method',
    'args',
    'options',
    'spec',
    'ctorArgs',
    'bundles',
    'strategy',
    'objectId',
    'name',
    'resources',
    'kind',
  ]) {
    if (rand() < 0.5) msg[k] = randomValue();
  }
  if (rand() < 0.3) msg.rid = 'not-a-number';
  return pack(msg);
}

async function blast(
  address: string,
  token: string,
  frames: number,
  register: boolean,
): Promise<number> {
  let closedCount = 0;
  let sent = 0;
  while (sent < frames) {
    const ws = new WebSocket(`ws://${address}`, { headers: { authorization: `Bearer ${token}` } });
    await new Promise<void>((resolve) => {
      ws.on('error', () => {});
      ws.once('close', () => {
        closedCount++;
        resolve();
      });
      ws.once('open', () => {
        if (register) ws.send(pack({ type: 'registerClient', rid: 1, kind: 'driver', pid: 1 }));
        // Send a burst; the peer closes the connection at the first bad frame.
        for (let i = 0; i < 8 && sent < frames; i++, sent++) ws.send(randomFrame());
        setTimeout(() => ws.terminate(), 30);
      });
    });
  }
  return closedCount;
}

test.before(async () => {
  setLogSink(() => {}); // hundreds of expected warnings
  cluster = await init({ address: 'local', local: { node: { numCpus: 2 } } });
});
test.after(async () => {
  await shutdown();
});

test('random frames against the head: it keeps serving', async () => {
  await blast(cluster.address, cluster.token, 300, false);
  await blast(cluster.address, cluster.token, 300, true);
  const c = CounterActor.remote(1);
  assert.is(await c.incr.remote(1), 2);
});

test('random frames against a worker: it keeps serving', async () => {
  const c = CounterActor.remote(10);
  assert.is(await c.incr.remote(1), 11);
  const { address } = await actorInfo(c);
  await blast(address!, cluster.token, 400, false);
  assert.is(await c.incr.remote(1), 12);
  assert.is((await actorInfo(c)).state, 'ALIVE');
});

test.run();
