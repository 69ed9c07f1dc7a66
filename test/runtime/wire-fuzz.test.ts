/**
 * Schema-driven fuzzing of every wire message type: for each type, instances broken at one
 * random place go to the head (as a driver) and to a worker's data port. Every broken request is
 * answered with INVALID_ARGUMENT on a connection that stays up, every broken one-way message
 * closes only its own connection, and afterwards the head and the worker still serve calls.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { type ClusterInfo, actorInfo, defineActor, init, shutdown } from '../../runtime/index.ts';
import { setLogSink } from '../../runtime/log.ts';
import { type Message, type MessageType, acceptedBy } from '../../runtime/protocol.ts';
import { type Connection, connect } from '../../runtime/transport.ts';
import { messageSchemas } from '../../runtime/wire-schemas.ts';
import type { Schema } from '../../runtime/schema.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { fixture } from './helpers.ts';
import { mutate, sample, seeded } from './schema-fuzz.ts';

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');
let cluster: ClusterInfo;
const r = seeded(20261123);
const perType = 25;
const types = Object.keys(messageSchemas) as MessageType[];

test.before(async () => {
  setLogSink(() => {});
  cluster = await init({ address: 'local', local: { node: { numCpus: 2 } } });
});
test.after(async () => {
  await shutdown();
});

async function client(address: string, register: boolean): Promise<Connection> {
  const conn = await connect(address, { token: cluster.token, handler: () => undefined });
  if (register) await conn.request({ type: 'registerClient', kind: 'driver', pid: process.pid });
  return conn;
}

/**
 * Sends `perType` broken instances of every type to an endpoint that accepts `accepted`: a
 * request of an accepted type must be refused with INVALID_ARGUMENT on a connection that stays
 * up; anything else (one-way, not a message, not for this endpoint) closes only that connection.
 * Returns [refused requests, closed connections].
 */
async function fuzz(
  address: string,
  register: boolean,
  accepted: ReadonlySet<string>,
): Promise<[number, number]> {
  let refused = 0;
  let closes = 0;
  let conn = await client(address, register);
  for (const type of types) {
    const schema = messageSchemas[type] as Schema<unknown>;
    for (let i = 0; i < perType; i++) {
      const m = mutate(sample(schema, r), schema, r) as Record<string, unknown>;
      if (schema.check(m, '') === undefined) continue; // the mutation happened to be valid
      const answered =
        typeof m === 'object' &&
        m !== null &&
        m.type === type &&
        type !== 'reply' &&
        accepted.has(type) &&
        Number.isSafeInteger(m.rid);
      if (answered) {
        const err = await new Promise<{ code?: string } | undefined>((resolve) =>
          conn.requestCb(m as never, (e) => resolve(e as never)),
        );
        assert.is(err?.code, 'INVALID_ARGUMENT', `${type}: ${JSON.stringify(m).slice(0, 200)}`);
        refused++;
      } else {
        const closed = new Promise<void>((resolve) => conn.onClose(() => resolve()));
        conn.send(m as unknown as Message);
        await closed;
        closes++;
        conn = await client(address, register);
      }
    }
  }
  conn.close('fuzz done');
  return [refused, closes];
}

test('broken instances of every message type against the head', async () => {
  const [refused, closes] = await fuzz(cluster.address, true, acceptedBy('head'));
  assert.ok(refused > 300 && closes > 50, `${refused} refused, ${closes} closed`);
  const c = CounterActor.remote(1);
  assert.is(await c.incr.remote(1), 2);
});

test('broken instances of every message type against a worker', async () => {
  const c = CounterActor.remote(10);
  assert.is(await c.incr.remote(1), 11);
  const { address } = await actorInfo(c);
  const [refused, closes] = await fuzz(address!, false, acceptedBy('data'));
  assert.ok(refused > 50 && closes > 300, `${refused} refused, ${closes} closed`);
  assert.is(await c.incr.remote(1), 12);
  assert.is((await actorInfo(c)).state, 'ALIVE');
});

test.run();
