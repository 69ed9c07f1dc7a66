import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { isEngineError } from '../../engines/http/errors.ts';
import { httpCall, httpStream } from '../../engines/http/http-call.ts';

/** A loopback server answering with `handle`; counts requests and connections. */
async function serve(handle: (req: IncomingMessage, res: ServerResponse, n: number) => void) {
  let requests = 0;
  let connections = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => handle(req, res, ++requests));
  });
  server.on('connection', () => connections++);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    stats: () => ({ requests, connections }),
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
}

test('a kept-alive connection the server dropped is retried once on a fresh one', async () => {
  const s = await serve((req, res, n) => {
    // The second request arrives on the first, kept-alive connection: drop it unanswered, as a
    // server closing an idle connection at that moment would.
    if (n === 2) return req.socket.destroy();
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ n }));
  });
  try {
    assert.equal(await httpCall(`${s.url}/a`, { x: 1 }, { timeoutMs: 5000 }), { n: 1 });
    assert.equal(await httpCall(`${s.url}/a`, { x: 2 }, { timeoutMs: 5000 }), { n: 3 });
    assert.equal(s.stats(), { requests: 3, connections: 2 });
  } finally {
    await s.close();
  }
});

test('when every kept-alive connection is stale (the server restarted), the retry opens a fresh one', async () => {
  const perSocket = new WeakMap<object, number>();
  const s = await serve((req, res) => {
    // Every connection answers its first request only: a server that died and came back drops
    // whatever was kept alive from before.
    const n = (perSocket.get(req.socket) ?? 0) + 1;
    perSocket.set(req.socket, n);
    if (n > 1) return req.socket.destroy();
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ ok: true }));
  });
  try {
    // Two requests at once leave two kept-alive connections in the pool.
    await Promise.all([1, 2].map(() => httpCall(`${s.url}/a`, {}, { timeoutMs: 5000 })));
    assert.is(s.stats().connections, 2);
    const out = await httpCall(`${s.url}/a`, {}, { timeoutMs: 5000 }).catch((e: unknown) => e);
    assert.equal(out, { ok: true }, String(out));
    assert.is(s.stats().connections, 3);
  } finally {
    await s.close();
  }
});

test('a fresh connection dropped before the answer is a network error, not retried', async () => {
  const s = await serve((req) => req.socket.destroy());
  try {
    const err = await httpCall(`${s.url}/a`, { x: 1 }, { timeoutMs: 5000 }).catch(
      (e: unknown) => e,
    );
    assert.ok(isEngineError(err));
    assert.is(err.code, 'NETWORK');
    assert.ok(err.retryable);
    assert.is(s.stats().requests, 1);
  } finally {
    await s.close();
  }
});

test('text answers come back as text unless JSON is expected', async () => {
  const s = await serve((_req, res) => res.end('Cache flushed.'));
  try {
    assert.is(await httpCall(`${s.url}/flush_cache`, {}, { timeoutMs: 5000 }), 'Cache flushed.');
    const err = await httpCall(
      `${s.url}/generate`,
      {},
      { timeoutMs: 5000, expectJson: true },
    ).catch((e: unknown) => e);
    assert.ok(isEngineError(err));
    assert.is(err.code, 'PROTOCOL');
    assert.match(err.message, /not JSON: "Cache flushed\."/);
  } finally {
    await s.close();
  }
});

test('an unbounded time limit does not fire at once; a cancelled call says so', async () => {
  const s = await serve((_req, res) => setTimeout(() => res.end('{}'), 50));
  try {
    assert.equal(
      await httpCall(`${s.url}/a`, undefined, { timeoutMs: Number.POSITIVE_INFINITY }),
      {},
    );
    const controller = new AbortController();
    const p = httpCall(`${s.url}/a`, undefined, {
      timeoutMs: 5000,
      signal: controller.signal,
    }).catch((e: unknown) => e);
    controller.abort(new Error('stop'));
    const err = await p;
    assert.ok(isEngineError(err));
    assert.is(err.code, 'ABORTED');
  } finally {
    await s.close();
  }
});

test('httpStream hands over each event as it comes, however the bytes are split', async () => {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const s = await serve((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    // An event split across writes, CRLF line ends, a comment and a two-line data field.
    res.write('data: {"a"');
    res.write(':1}\r\n\r\n: keep-alive\n\ndata: x\ndata: y\n\n');
    void held.then(() => res.end('data: [DONE]\n\ndata: after-done\n\n'));
  });
  try {
    const events: string[] = [];
    await httpStream(`${s.url}/g`, {}, { timeoutMs: 5000 }, (d) => {
      events.push(d);
      // The end is only written once both events arrived: they came before the answer ended.
      if (events.length === 2) release();
    });
    assert.equal(events, ['{"a":1}', 'x\ny']);
  } finally {
    await s.close();
  }
});

test('httpStream: an error status and a connection lost part way fail as httpCall does', async () => {
  const s = await serve((req, res) => {
    if (req.url === '/bad') {
      res.statusCode = 400;
      res.setHeader('content-type', 'application/json');
      return res.end(JSON.stringify({ message: 'prompt too long' }));
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: {"a":1}\n\n', () => res.destroy());
  });
  try {
    const bad = await httpStream(`${s.url}/bad`, {}, { timeoutMs: 5000 }, () => undefined).catch(
      (e: unknown) => e,
    );
    assert.ok(isEngineError(bad) && bad.code === 'HTTP_STATUS' && bad.status === 400, String(bad));
    assert.match((bad as Error).message, 'prompt too long');
    const events: string[] = [];
    const cut = await httpStream(`${s.url}/cut`, {}, { timeoutMs: 5000 }, (d) =>
      events.push(d),
    ).catch((e: unknown) => e);
    assert.ok(isEngineError(cut) && cut.code === 'NETWORK', String(cut));
    assert.equal(events, ['{"a":1}']);
  } finally {
    await s.close();
  }
});

test.run();
