import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { bulkTicketHeader } from '../../runtime/bulk.ts';
import { setLogSink } from '../../runtime/log.ts';
import { Immutable } from '../../runtime/out-of-band.ts';
import { pack } from '../../runtime/protocol.ts';
import {
  type Connection,
  type Server,
  bulkBytesInFlight,
  connect,
  listen,
} from '../../runtime/transport.ts';
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
      if (m.type === 'call' && m.method === 'echoInPlace') return new Immutable(m.args[0]);
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

test('64 MiB crosses the bulk link bit-exact both ways; small messages overtake it', async () => {
  const c = await connect(server.address, { token, heartbeatTimeoutMs: 60_000 });
  // Bytes no two places alike, so a piece landing at the wrong offset shows.
  const big = new Uint32Array(16 << 20).map((_, i) => Math.imul(i, 2654435761) >>> 0);
  const order: string[] = [];
  const pBig = c.request({ type: 'call', method: 'echo', args: [big] }).then((v) => {
    order.push('big');
    return v as Uint32Array;
  });
  const pSmall = c
    .request({ type: 'call', method: 'echo', args: ['small'] })
    .then(() => order.push('small'));
  const [back] = await Promise.all([pBig, pSmall]);
  assert.equal(order, ['small', 'big']);
  assert.ok(back instanceof Uint32Array && back.length === big.length);
  assert.is(
    Buffer.compare(
      Buffer.from(back.buffer, back.byteOffset, back.byteLength),
      Buffer.from(big.buffer),
    ),
    0,
  );
  // The bytes came over the bulk link, into one buffer of the message's size (its skeleton and
  // the array), not through WebSocket frames.
  assert.ok(c.bulkLinked, 'the client opened its bulk link');
  assert.ok(back.buffer.byteLength < big.byteLength + 4096, `${back.buffer.byteLength} bytes`);
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

test('an Immutable reply (written from its own arrays, no send buffer) arrives intact', async () => {
  const c = await connect(server.address, { token, bulkMinBytes: 256 * 1024 });
  // Odd lengths, so the parts between arrays carry padding.
  const value = {
    a: Float32Array.from({ length: 300_001 }, (_, i) => i),
    b: Buffer.alloc(100_003, 7),
    c: [new Int16Array(70_001).fill(-2)],
    step: 9,
  };
  const back = (await c.request({
    type: 'call',
    method: 'echoInPlace',
    args: [value],
  })) as typeof value;
  assert.ok(back.a.every((x, i) => x === i));
  assert.ok(Buffer.isBuffer(back.b) && back.b.length === 100_003 && back.b.every((x) => x === 7));
  assert.ok(back.c[0] instanceof Int16Array && back.c[0].length === 70_001);
  assert.ok(back.c[0].every((x) => x === -2));
  assert.is(back.step, 9);
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
      'a client asking for a bulk link',
      (ws) => ws.send(pack({ type: 'bulkOpen' })),
      /bulkOpen from a client/,
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

/**
 * A server written by hand that answers any request by asking for the bulk link and then does
 * `onLink` with it: a peer that dies mid-message, or one that sends nonsense.
 */
async function handMadeServer(
  onLink: (sock: Socket) => void,
): Promise<{ address: string; close(): void }> {
  const http = createServer();
  const wss = new WebSocketServer({ noServer: true });
  const links = new Set<Socket>();
  wss.on('headers', (headers) => headers.push(`${bulkTicketHeader}: t1`));
  http.on('upgrade', (req, sock: Socket, head) => {
    if (req.headers.upgrade === 'websocket') {
      return wss.handleUpgrade(req, sock, head, (ws) =>
        ws.on('message', () => ws.send(pack({ type: 'bulkOpen' }))),
      );
    }
    assert.is(req.headers[bulkTicketHeader], 't1', 'the link names its ticket');
    assert.is(req.headers.authorization, `Bearer ${token}`, 'and carries the token');
    sock.write(
      'HTTP/1.1 101 Switching Protocols\r\nUpgrade: rtjob-bulk\r\nConnection: Upgrade\r\n\r\n',
    );
    links.add(sock);
    onLink(sock);
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  return {
    address: `127.0.0.1:${(http.address() as AddressInfo).port}`,
    close: () => {
      for (const ws of wss.clients) ws.terminate();
      for (const l of links) l.destroy();
      http.closeAllConnections();
      http.close();
    },
  };
}

/** A bulk link header: magic and length as given. */
function linkHeader(magic: number, bytes: number): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt32LE(magic, 0);
  h.writeUInt32LE(bytes, 4);
  return h;
}
const RTB1 = 0x31425452;

test('a peer dying mid-message fails the request and gives its bytes back', async () => {
  const before = bulkBytesInFlight();
  let sent: () => void;
  const halfway = new Promise<void>((r) => (sent = r));
  const peer = await handMadeServer((sock) => {
    sock.write(linkHeader(RTB1, 64 << 20));
    // Half of the 64 MiB announced, then the process "dies": both sockets go at once.
    sock.write(Buffer.alloc(32 << 20, 1), () => sent());
  });
  const c = await connect(peer.address, { token });
  const reply = rejection(c.request({ type: 'ping' }));
  await halfway;
  assert.ok(
    bulkBytesInFlight() - before === 64 << 20,
    'the announced size is held while it arrives',
  );
  peer.close();
  const e = await reply;
  assert.is(e.code, 'CONNECTION');
  assert.match(e.message, /closed/);
  await until(() => bulkBytesInFlight() === before, 2000, 'the partial message to be freed');
});

test('a bad bulk header closes the connection with a one-line reason', async () => {
  const cases: [string, Buffer, RegExp][] = [
    ['bad magic', linkHeader(0x12345678, 100), /bad bulk message header/],
    ['empty', linkHeader(RTB1, 0), /empty bulk message/],
    ['over the limit', linkHeader(RTB1, 2 ** 32 - 1), /over the limit of 2147483647/],
    [
      'not a message',
      Buffer.concat([linkHeader(RTB1, 4), Buffer.from('junk')]),
      /malformed large message/,
    ],
  ];
  const before = bulkBytesInFlight();
  for (const [name, bytes, why] of cases) {
    const peer = await handMadeServer((sock) => sock.write(bytes));
    const c = await connect(peer.address, { token });
    const e = await rejection(c.request({ type: 'ping' }));
    assert.is(e.code, 'CONNECTION', name);
    assert.match(e.message, why, name);
    assert.not.match(e.message, /\n/, `${name}: one line`);
    peer.close();
  }
  assert.is(bulkBytesInFlight(), before, 'nothing held');
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
