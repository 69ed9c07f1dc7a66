/**
 * Authenticated peers that send nonsense: every field is checked against its message's schema
 * before it touches head state, a large message's announced size is checked before anything is
 * allocated and only a registered peer may send one, and nothing a peer does can throw out of an
 * event handler.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { type Socket, connect as tcpConnect } from 'node:net';
import { WebSocket } from 'ws';
import { bulkTicketHeader } from '../../runtime/bulk.ts';
import { type Head, startHead } from '../../runtime/head/head.ts';
import { setLogSink } from '../../runtime/log.ts';
import { pack, unpack } from '../../runtime/protocol.ts';
import { type Connection, bulkBytesInFlight, connect, listen } from '../../runtime/transport.ts';
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
 * A peer on a plain ws socket, for what a well-behaved `Connection` never sends; `link` opens a
 * bulk link by hand (the ws handshake gave its ticket) and answers the server's status line.
 */
async function rawPeer(address: string, token: string) {
  const ws = new WebSocket(`ws://${address}`, { headers: { authorization: `Bearer ${token}` } });
  let ticket = '';
  ws.once('upgrade', (res) => (ticket = String(res.headers[bulkTicketHeader])));
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  const gone = new Promise<string>((resolve) =>
    ws.once('close', (_code, why: Buffer) => resolve(why.toString())),
  );
  let rid = 1;
  return {
    ws,
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
    /** Opens a bulk link with these headers (by default the token and this peer's ticket). */
    async link(
      headers: Record<string, string> = {
        authorization: `Bearer ${token}`,
        [bulkTicketHeader]: ticket,
      },
    ): Promise<{ status: string; sock: Socket }> {
      const [host, port] = address.split(':') as [string, string];
      const sock = tcpConnect({ host, port: Number(port) });
      await new Promise((r) => sock.once('connect', r));
      const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
      sock.write(
        `GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: rtjob-bulk\r\n${lines.join('')}\r\n`,
      );
      const answer = await new Promise<Buffer>((r) => sock.once('data', r));
      return { status: answer.toString('latin1').split('\r\n')[0]!, sock };
    },
  };
}

/** A bulk link message header: 'RTB1' and a length. */
function announce(bytes: number): Buffer {
  const h = Buffer.alloc(8);
  h.write('RTB1', 0, 'latin1');
  h.writeUInt32LE(bytes, 4);
  return h;
}

test('D2: no bulk link before registering; a size over the limit holds nothing', async () => {
  const early = await rawPeer(head.address, head.token);
  assert.match((await early.link()).status, / 409 /);
  assert.match(await early.gone, /large message before registering/);

  const before = bulkBytesInFlight();
  const d = await rawPeer(head.address, head.token);
  await d.request({ type: 'registerClient', kind: 'driver', pid: process.pid });
  const { status, sock } = await d.link();
  assert.match(status, / 101 /);
  // The head takes constructor arguments up to 256 MiB and no more.
  sock.write(announce(300 * 1024 * 1024));
  assert.match(await d.gone, /bulk message of 314572800 bytes over the limit of 269484032/);
  assert.is(bulkBytesInFlight(), before, 'nothing allocated for it');
  const other = await driver();
  assert.is(await other.request({ type: 'kvGet', key: 'x' }), null, 'the head still answers');
  other.close('test');
});

test('a peer dying mid-message gives back what the head held for it', async () => {
  const before = bulkBytesInFlight();
  const d = await rawPeer(head.address, head.token);
  await d.request({ type: 'registerClient', kind: 'driver', pid: process.pid });
  const { sock } = await d.link();
  sock.write(Buffer.concat([announce(100 * 1024 * 1024), Buffer.alloc(1024 * 1024)]));
  await until(
    () => bulkBytesInFlight() === before + 100 * 1024 * 1024,
    2000,
    'the message to begin',
  );
  sock.destroy();
  d.ws.terminate();
  await until(() => bulkBytesInFlight() === before, 2000, 'the partial message to be freed');
});

test('a bulk link needs the token and a live ticket; one per connection', async () => {
  const server = await listen({ token: 't', handler: () => 'ok' });
  const c = await rawPeer(server.address, 't');
  assert.match((await c.link({ [bulkTicketHeader]: 'x' })).status, / 401 /);
  assert.match(
    (await c.link({ authorization: 'Bearer t', [bulkTicketHeader]: 'x' })).status,
    / 403 /,
  );
  assert.match((await c.link()).status, / 101 /);
  assert.match((await c.link()).status, / 409 /);
  assert.match(await c.gone, /a second bulk link/);
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
