import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { WebSocket } from 'ws';
import { setLogSink } from '../../runtime/log.ts';
import { pack } from '../../runtime/protocol.ts';
import { type Connection, type Server, connect, listen } from '../../runtime/transport.ts';
import { rejection, until } from './helpers.ts';

const token = 'test-token-123';
const logs: string[] = [];
let server: Server;
const serverConns: Connection[] = [];

test.before(async () => {
  setLogSink((level, c, m) => logs.push(`${level} ${c} ${m}`));
  server = await listen({
    token,
    port: 0,
    maxFrameBytes: 4 * 1024 * 1024,
    heartbeatIntervalMs: 50,
    heartbeatTimeoutMs: 400,
    accepts: new Set(['call', 'ping']),
    onConnection: (c) => serverConns.push(c),
    handler: (m) => {
      if (m.type === 'ping') return 'pong';
      if (m.type === 'call' && m.method === 'echo') return m.args[0];
      if (m.type === 'call' && m.method === 'slow')
        return new Promise((r) => setTimeout(() => r('slow'), 100));
      throw new Error(`no ${m.type}`);
    },
  });
});
test.after(async () => {
  await server.close();
});

function raw(
  headers: Record<string, string> = { authorization: `Bearer ${token}` },
): Promise<WebSocket> {
  const ws = new WebSocket(`ws://${server.address}`, { headers });
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(ws));
    ws.once('unexpected-response', (_q, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    ws.once('error', reject);
  });
}

function closed(ws: WebSocket): Promise<number> {
  return new Promise((r) => ws.once('close', (code) => r(code)));
}

test('request/response by id, including errors from the handler', async () => {
  const c = await connect(server.address, { token });
  assert.is(await c.request({ type: 'ping' }), 'pong');
  const [a, b] = await Promise.all([
    c.request({ type: 'call', method: 'slow', args: [] }),
    c.request({ type: 'call', method: 'echo', args: [42] }),
  ]);
  assert.is(a, 'slow');
  assert.is(b, 42);
  const e = await rejection(c.request({ type: 'call', method: 'nope', args: [] }));
  assert.match(e.message, /no call/);
  c.close();
});

test('a wrong or missing token is refused with a logged reason', async () => {
  const e = await rejection(connect(server.address, { token: 'wrong' }));
  assert.is((e as { code?: string }).code, 'AUTH');
  await rejection(raw({}));
  assert.ok(logs.some((l) => l.includes('bad or missing token')));
});

test('a large message is fragmented and does not hold up small ones', async () => {
  const c = await connect(server.address, { token, bulkMinBytes: 256 * 1024 });
  const big = new Float32Array(3 * 1024 * 1024); // 12 MiB, 3x the frame limit
  big[big.length - 1] = 7;
  const order: string[] = [];
  const pBig = c.request({ type: 'call', method: 'echo', args: [big] }).then((v) => {
    order.push('big');
    return v;
  });
  const pSmall = c
    .request({ type: 'call', method: 'echo', args: ['small'] })
    .then(() => order.push('small'));
  const [back] = (await Promise.all([pBig, pSmall])) as [Float32Array, unknown];
  assert.is(back.length, big.length);
  assert.is(back[back.length - 1], 7);
  assert.equal(order, ['small', 'big']);
  c.close();
});

test('large arrays travel out of band: every kind intact, a snapshot at send, views on arrival', async () => {
  const c = await connect(server.address, { token, bulkMinBytes: 256 * 1024 });
  const value = {
    f32: Float32Array.from({ length: 300_000 }, (_, i) => i / 2),
    f64: Float64Array.from({ length: 70_000 }, (_, i) => -i),
    buf: Buffer.alloc(100_000, 9),
    i8: new Int8Array(90_000).fill(-3),
    small: new Uint16Array([1, 2, 3]),
    nested: [{ name: 'w', big: new Uint32Array(40_000).fill(5) }],
    meta: { step: 3, tag: 'x' },
  };
  const reply = c.request({ type: 'call', method: 'echo', args: [value] });
  // The message was copied when it was sent: changing the arrays now does not reach the peer.
  value.f32.fill(0);
  value.nested[0]!.big.fill(0);
  const back = (await reply) as typeof value;
  assert.ok(back.f32 instanceof Float32Array);
  assert.is(back.f32[299_999], 299_999 / 2);
  assert.ok(back.f64 instanceof Float64Array);
  assert.is(back.f64[69_999], -69_999);
  assert.ok(Buffer.isBuffer(back.buf));
  assert.is(back.buf.length, 100_000);
  assert.is(back.buf[99_999], 9);
  assert.ok(back.i8 instanceof Int8Array);
  assert.is(back.i8[5], -3);
  assert.equal([...back.small], [1, 2, 3]);
  assert.is(back.nested[0]!.name, 'w');
  assert.is(back.nested[0]!.big[39_999], 5);
  assert.equal(back.meta, { step: 3, tag: 'x' });
  // Views into the one buffer the message arrived in, not copies of each array.
  assert.is(back.f32.buffer, back.f64.buffer);
  c.close();
});

test('malformed, oversized, text and unknown frames close only that connection', async () => {
  const cases: [string, (ws: WebSocket) => void, RegExp][] = [
    ['garbage', (ws) => ws.send(Buffer.from([0xc1, 0xff, 0x00])), /no string type|not an object/],
    ['truncated', (ws) => ws.send(Buffer.from([0x92, 0x01])), /malformed frame/],
    ['text', (ws) => ws.send('hello'), /text frame/],
    [
      'unknown type',
      (ws) => ws.send(pack({ type: 'launchMissiles', rid: 1 })),
      /unknown message type/,
    ],
    [
      'not for this endpoint',
      (ws) => ws.send(pack({ type: 'createActor', rid: 1 })),
      /unexpected message type 'createActor'/,
    ],
    ['oversized', (ws) => ws.send(Buffer.alloc(5 * 1024 * 1024)), /socket error|Max payload/i],
    [
      'bad fragment',
      (ws) => {
        ws.send(pack({ type: 'fragment', fid: 1, total: 10, offset: 5, bytes: 2 }));
        ws.send(Buffer.alloc(2));
      },
      /fragment/,
    ],
  ];
  for (const [name, send, why] of cases) {
    const before = logs.length;
    const ws = await raw();
    const done = closed(ws);
    send(ws);
    const code = await done;
    assert.ok(code >= 1000, `${name}: closed with ${code}`);
    await until(() => logs.slice(before).some((l) => why.test(l)), 2000, `log for ${name}`);
  }
  const c = await connect(server.address, { token });
  assert.is(await c.request({ type: 'ping' }), 'pong', 'the server still serves');
  c.close();
});

test('a silent peer is closed by the heartbeat', async () => {
  const ws = await raw();
  // Stop answering pings by pausing the socket: no pongs go back.
  (ws as unknown as { _socket: { pause(): void } })._socket.pause();
  const before = logs.length;
  await until(
    () => logs.slice(before).some((l) => l.includes('heartbeat timeout')),
    3000,
    'heartbeat close',
  );
  ws.terminate();
});

test.run();
