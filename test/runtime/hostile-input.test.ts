/**
 * Authenticated peers that send nonsense: every field is checked against its message's schema
 * before it touches head state, fragments cost memory only as bytes arrive and only after a peer
 * registers, and nothing a peer does can throw out of an event handler.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { WebSocket } from 'ws';
import { type Head, startHead } from '../../runtime/head/head.ts';
import { setLogSink } from '../../runtime/log.ts';
import { pack, unpack } from '../../runtime/protocol.ts';
import {
  type Connection,
  connect,
  fragmentBytesInFlight,
  listen,
} from '../../runtime/transport.ts';
import { until } from './helpers.ts';

let head: Head;
const lines: string[] = [];

test.before(async () => {
  setLogSink((level, c, m) => lines.push(`${c} ${level}: ${m}`));
  head = await startHead({ port: 0, registerTimeoutMs: 300 });
});
test.after(async () => {
  await head.close();
});

async function driver(): Promise<Connection> {
  const conn = await connect(head.address, { token: head.token, handler: () => undefined });
  await conn.request({ type: 'registerClient', kind: 'driver', pid: process.pid });
  return conn;
}

/** Sends a raw request and resolves with the error it was answered with. */
function refused(
  conn: Connection,
  m: Record<string, unknown>,
): Promise<{ code?: string; message: string }> {
  return new Promise((resolve, reject) =>
    conn.requestCb(m as never, (err) =>
      err ? resolve(err as never) : reject(new Error('accepted')),
    ),
  );
}

test('D1: a registerNode whose nodeId is an object is refused, leaves no node, and its close is harmless', async () => {
  const conn = await connect(head.address, { token: head.token, handler: () => undefined });
  const err = await refused(conn, {
    type: 'registerNode',
    nodeId: { evil: 1 },
    hostname: 'x',
    host: '127.0.0.1',
    pid: 1,
    resources: { CPU: 1 },
    sessionDir: '/tmp',
  });
  assert.is(err.code, 'INVALID_ARGUMENT');
  assert.match(err.message, /nodeId: expected a string, got an object/);
  assert.equal(head.listNodes(), [], 'nothing half-registered');
  conn.close('test');
  await until(() => conn.closed, 2000, 'close');
  const d = await driver();
  assert.equal(await d.request({ type: 'listNodes' }), [], 'the head still answers');
  d.close('test');
});

test('D13: type-confused kvPut / kvGet / registerNode fields get InvalidArgumentError naming the field', async () => {
  const d = await driver();
  const put = await refused(d, { type: 'kvPut', key: 'k', value: 'not bytes' });
  assert.is(put.code, 'INVALID_ARGUMENT');
  assert.match(put.message, /value: expected bytes/);
  const get = await refused(d, { type: 'kvGet', key: 42 });
  assert.match(get.message, /key: expected a string/);
  const huge = await refused(d, { type: 'kvGet', key: 'k'.repeat(5000) });
  assert.match(huge.message, /key: longer than/);
  const node = await connect(head.address, { token: head.token, handler: () => undefined });
  const inf = await refused(node, {
    type: 'registerNode',
    hostname: 'x',
    host: 'h',
    pid: 1,
    resources: { CPU: Infinity },
    sessionDir: '/',
  });
  assert.match(inf.message, /resources\.CPU: expected a finite number/);
  node.close('test');
  assert.is(await d.request({ type: 'kvGet', key: 'k' }), null, 'the connection still serves');
  d.close('test');
});

/**
 * A peer on a plain ws socket, for frames a well-behaved `Connection` never sends: a fragment is
 * a header message followed by a frame of raw bytes.
 */
async function rawPeer(address: string, token: string) {
  const ws = new WebSocket(`ws://${address}`, { headers: { authorization: `Bearer ${token}` } });
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  const gone = new Promise<string>((resolve) =>
    ws.once('close', (_code, why: Buffer) => resolve(why.toString())),
  );
  let rid = 1;
  return {
    gone,
    /** Sends a request and resolves with the reply's value. */
    request(m: Record<string, unknown>): Promise<unknown> {
      const mine = rid++;
      ws.send(pack({ ...m, rid: mine }));
      return new Promise((resolve) => {
        const on = (data: Buffer) => {
          const r = unpack(data) as { rid?: number; value?: unknown };
          if (r.rid !== mine) return;
          ws.off('message', on);
          resolve(r.value);
        };
        ws.on('message', on);
      });
    },
    fragment(h: { fid: number; total: number; offset: number }, data: Uint8Array): void {
      ws.send(pack({ type: 'fragment', ...h, bytes: data.length }));
      ws.send(data);
    },
    /** Sends one frame of raw bytes. */
    frame: (bytes: Uint8Array) => ws.send(bytes),
  };
}

test('D2: fragments before registering close the connection; declared sizes reserve nothing', async () => {
  const early = await rawPeer(head.address, head.token);
  early.fragment({ fid: 1, total: 2 ** 31 - 2, offset: 0 }, new Uint8Array(16));
  assert.match(await early.gone, /fragment before registering/);

  const d = await rawPeer(head.address, head.token);
  await d.request({ type: 'registerClient', kind: 'driver', pid: process.pid });
  const before = fragmentBytesInFlight();
  for (let fid = 1; fid <= 60; fid++) {
    d.fragment({ fid, total: 200 * 1024 * 1024, offset: 0 }, new Uint8Array(16));
  }
  const t0 = Date.now();
  assert.is(await d.request({ type: 'kvGet', key: 'x' }), null);
  assert.ok(Date.now() - t0 < 2000, 'the head answers at once');
  assert.ok(
    fragmentBytesInFlight() - before <= 60 * 16,
    `holds only what arrived (${fragmentBytesInFlight()})`,
  );
  // More concurrent assemblies than a sender ever uses: the connection goes, its bytes are freed.
  for (let fid = 61; fid <= 70; fid++) {
    d.fragment({ fid, total: 1024, offset: 0 }, new Uint8Array(16));
  }
  assert.match(await d.gone, /fragmented messages at once/);
  await until(() => fragmentBytesInFlight() === before, 2000, 'bytes released');
});

test('fragments in flight are bounded per connection', async () => {
  const server = await listen({ token: 't', handler: () => 'ok', maxBytesInFlight: 1024 * 1024 });
  const c = await rawPeer(server.address, 't');
  for (let fid = 1; fid <= 3; fid++) {
    c.fragment({ fid, total: 10 * 1024 * 1024, offset: 0 }, new Uint8Array(512 * 1024));
  }
  assert.match(await c.gone, /fragments in flight over this connection's 1048576 bytes/);
  await server.close();
});

test('a fragment header must end its frame and be followed by exactly its bytes', async () => {
  const server = await listen({ token: 't', handler: () => 'ok' });
  const header = { type: 'fragment', fid: 1, total: 100, offset: 0, bytes: 20 };
  const lying = await rawPeer(server.address, 't');
  lying.frame(pack(header));
  lying.frame(new Uint8Array(10)); // 20 announced
  assert.match(await lying.gone, /fragment data does not match its header/);
  const crowded = await rawPeer(server.address, 't');
  crowded.frame(Buffer.concat([pack(header), pack({ type: 'ping', rid: 1 })]));
  assert.match(await crowded.gone, /a fragment header must end its frame/);
  await server.close();
});

test('D10: a connection that never registers is closed; refused tokens are logged once a minute per address', async () => {
  const idle = await connect(head.address, { token: head.token, handler: () => undefined });
  const why = new Promise<string>((resolve) => idle.onClose(resolve));
  assert.match(await why, /did not register within 300 ms/);

  const n0 = lines.filter((l) => l.includes('rejected connection')).length;
  for (let i = 0; i < 20; i++) {
    const ws = new WebSocket(`ws://${head.address}`, {
      headers: { authorization: 'Bearer wrong' },
    });
    await new Promise<void>((resolve) => {
      ws.on('error', () => resolve());
      ws.on('close', () => resolve());
    });
  }
  const logged = lines.filter((l) => l.includes('rejected connection')).length - n0;
  assert.ok(logged <= 1, `20 refusals, ${logged} lines`);
});

test('malformed frames of every kind never take the head down', async () => {
  const d = await driver();
  const frames = [
    pack({
      type: 'createActor',
      rid: 5,
      actorId: 'x'.repeat(10),
      spec: 1,
      options: null,
      ctorArgs: 'no',
    }),
    pack({ type: 'waitActor', rid: 6, actorId: [], afterIncarnation: -1, untilAlive: 'yes' }),
    pack({ type: 'createPlacementGroup', rid: 7, bundles: [], strategy: 'PACK', detached: false }),
  ];
  for (const f of frames) (d as unknown as { ws: WebSocket }).ws.send(f);
  assert.is(await d.request({ type: 'kvGet', key: 'still' }), null);
  d.close('test');
  assert.equal(head.listActors(), []);
  assert.equal(head.listPlacementGroups(), []);
});

test.run();
