// The operator plane's input limits, against a real head process (`rtjob start --head`, its
// default limits: 1 MiB JSON bodies, 100 MiB packages inflated to at most 400 MiB): a body that
// declares more than the limit is answered 413 before any of it is sent; a gzip or deflate body is
// inflated as a stream and refused the moment it passes the limit, so a bomb does not lift the
// head's peak memory (VmHWM) by its size; and after a few thousand malformed requests the head's
// resident memory (VmRSS) is back near where it started and it still serves.
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { deflateSync, gzipSync } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { Sandbox } from '../cli/helpers.ts';

const MiB = 1024 * 1024;
const sb = new Sandbox();
let base = '';
let token = '';
let pid = 0;
/** The head's VmRSS when it had started and served a request. */
let startRss = 0;

/** `VmRSS` and `VmHWM` of the head process, in bytes. */
function memory(): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(status)![1]) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}
const mib = (b: number) => `${(b / MiB).toFixed(0)} MiB`;

interface Answer {
  status: number;
  body: string;
  /** Bytes of the request body written before the answer came. */
  sent: number;
}

/**
 * One request on its own connection. `body` is written in `chunk`-sized pieces while no answer
 * has come (so a refused body stops being sent), and `declare` sets a content-length whatever
 * the body's size; the connection is dropped once the answer is read.
 */
function send(
  method: string,
  path: string,
  opts: {
    headers?: Record<string, string>;
    body?: Buffer;
    declare?: number;
    chunked?: boolean;
    /** Leave the request open after the body (no end): an answer must come without it. */
    hold?: boolean;
    chunk?: number;
  } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const u = new URL(path, base);
    const headers: Record<string, string | number> = {
      authorization: `Bearer ${token}`,
      ...opts.headers,
    };
    if (opts.declare !== undefined) headers['content-length'] = opts.declare;
    else if (opts.chunked) headers['transfer-encoding'] = 'chunked';
    else if (opts.body) headers['content-length'] = opts.body.length;
    const req = request({
      host: u.hostname,
      port: u.port,
      path: u.pathname,
      method,
      headers,
      agent: false,
    });
    let sent = 0;
    let answered = false;
    const timer = setTimeout(() => {
      req.destroy();
      reject(new Error(`${method} ${path}: no answer in 30 s (${sent} bytes sent)`));
    }, 30_000);
    req.on('response', (res) => {
      answered = true;
      const at = sent;
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => {
        clearTimeout(timer);
        req.destroy();
        resolve({ status: res.statusCode ?? 0, body: text, sent: at });
      });
    });
    req.on('error', (e) => {
      clearTimeout(timer);
      if (!answered) reject(new Error(`${method} ${path}: ${e.message} (${sent} bytes sent)`));
    });
    const body = opts.body ?? Buffer.alloc(0);
    const piece = opts.chunk ?? 64 * 1024;
    const pump = () => {
      while (!answered && sent < body.length) {
        const part = body.subarray(sent, sent + piece);
        sent += part.length;
        if (!req.write(part)) return void req.once('drain', pump);
      }
      if (!answered && opts.declare === undefined && !opts.hold) req.end();
    };
    req.flushHeaders();
    pump();
  });
}

/** Raw bytes on a fresh connection; the status of whatever the server answers (0: none). */
function raw(bytes: string): Promise<number> {
  return new Promise((resolve) => {
    const u = new URL(base);
    const s = connect(Number(u.port), u.hostname);
    let got = '';
    const done = () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(got)?.[1] ?? 0));
    const timer = setTimeout(() => s.destroy(), 10_000);
    s.on('data', (d) => {
      got += d.toString('latin1');
      if (/\r\n\r\n/.test(got)) s.end();
    });
    s.on('close', () => {
      clearTimeout(timer);
      done();
    });
    s.on('error', () => undefined);
    s.write(bytes);
  });
}

/** `n` copies of one gzip member of `size` repeated `byte`s: a gzip stream that inflates to n×size. */
function gzipBomb(size: number, n: number, byte = 0): Buffer {
  const member = gzipSync(Buffer.alloc(size, byte), { level: 9 });
  return Buffer.concat(Array.from({ length: n }, () => member));
}

test.before(async () => {
  await sb.startHead(['--num-cpus', '1']);
  const c = sb.clusterFile();
  base = c.dashboardUrl;
  token = c.token;
  pid = c.headPid!;
  assert.ok(pid > 0, 'the cluster file names the head daemon');
  assert.is((await send('GET', '/api/jobs')).status, 200);
  startRss = memory().rss;
  console.log(`  head pid ${pid}: ${mib(startRss)} resident after start`);
});
test.after(() => sb.cleanup());

test('a body that declares more than the limit is answered 413 before any of it is sent', async () => {
  const json = await send('POST', '/api/jobs', { declare: 300_000_000 });
  assert.is(json.status, 413);
  assert.is(json.sent, 0);
  assert.match(json.body, /300000000 bytes \(its content-length\) is over the 1048576-byte limit/);
  const pkg = await send('PUT', `/api/packages/${'a'.repeat(64)}`, { declare: 300 * MiB });
  assert.is(pkg.status, 413);
  assert.match(pkg.body, /PACKAGE_TOO_LARGE/);
  // Without a content-length (chunked), the refusal comes once the limit is passed: 2 MiB are
  // sent and the request is left open, so an answer that waited for the end would never come.
  const chunked = await send('POST', '/api/jobs', {
    chunked: true,
    hold: true,
    body: Buffer.alloc(2 * MiB, 0x20),
  });
  assert.is(chunked.status, 413);
  assert.match(chunked.body, /over the 1048576-byte limit/);
});

test('a gzip bomb is refused as it inflates: the head’s peak memory does not follow its size', async () => {
  const before = memory();
  // A package archive that inflates to 1 GiB (the head stops at 400 MiB), 1 MiB on the wire.
  const pkgBomb = gzipBomb(64 * MiB, 16);
  const pkg = await send('PUT', `/api/packages/${'b'.repeat(64)}`, { body: pkgBomb });
  assert.is(pkg.status, 413, pkg.body);
  assert.match(pkg.body, /over the 400 MiB limit/);
  // A JSON body of 512 MiB of spaces, gzip'd (0.5 MiB) and deflated: refused at 1 MiB inflated.
  const jsonBomb = gzipBomb(64 * MiB, 8, 0x20);
  const gz = await send('POST', '/api/jobs', {
    headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
    body: jsonBomb,
  });
  assert.is(gz.status, 413, gz.body);
  assert.match(gz.body, /inflated is over the 1048576-byte limit/);
  const deflated = deflateSync(Buffer.alloc(128 * MiB, 0x20), { level: 9 });
  const df = await send('POST', '/api/jobs', {
    headers: { 'content-type': 'application/json', 'content-encoding': 'deflate' },
    body: deflated,
  });
  assert.is(df.status, 413, df.body);
  const after = memory();
  console.log(
    `  bombs: VmHWM ${mib(before.hwm)} → ${mib(after.hwm)}, VmRSS ${mib(before.rss)} → ${mib(after.rss)}`,
  );
  assert.ok(
    after.hwm - Math.max(before.hwm, startRss) < 96 * MiB,
    `peak rose ${mib(after.hwm - before.hwm)} (a 400 MiB inflate would show)`,
  );
  // A compressed body that is within the limit is read as what it inflates to.
  const ok = await send('POST', '/api/jobs', {
    headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
    body: gzipSync(JSON.stringify({ entrypoint: ['true'], jobId: 'gz' })),
  });
  assert.is(ok.status, 200, ok.body);
  const gzJob = await send('GET', '/api/jobs/gz');
  assert.is(gzJob.status, 200);
});

test('a few thousand malformed requests: each gets its 4xx, and resident memory comes back', async () => {
  const smallBomb = gzipBomb(4 * MiB, 1, 0x20);
  const kinds: [string, () => Promise<number>, number[]][] = [
    [
      'bad JSON',
      async () => (await send('POST', '/api/jobs', { body: Buffer.from('{"entry') })).status,
      [400],
    ],
    [
      'not gzip',
      async () =>
        (
          await send('POST', '/api/jobs', {
            headers: { 'content-encoding': 'gzip' },
            body: Buffer.from('not gzip at all'),
          })
        ).status,
      [400],
    ],
    [
      'unknown encoding',
      async () =>
        (
          await send('POST', '/api/jobs', {
            headers: { 'content-encoding': 'br' },
            body: Buffer.from('{}'),
          })
        ).status,
      [415],
    ],
    [
      'over by a byte',
      async () => (await send('POST', '/api/jobs', { body: Buffer.alloc(MiB + 1, 0x20) })).status,
      [413],
    ],
    [
      'declared huge',
      async () => (await send('POST', '/api/jobs/x/metrics', { declare: 2 ** 40 })).status,
      [413],
    ],
    [
      'small bomb',
      async () =>
        (
          await send('POST', '/api/jobs', {
            headers: { 'content-encoding': 'gzip' },
            body: smallBomb,
          })
        ).status,
      [413],
    ],
    [
      'bad schema',
      async () =>
        (await send('POST', '/api/jobs', { body: Buffer.from('{"entrypoint":42}') })).status,
      [400],
    ],
    ['garbage line', () => raw('\x00\x01GARBAGE /\r\n\r\n'), [400]],
    ['bad header', () => raw('GET /api/jobs HTTP/1.1\r\nbad header\r\n\r\n'), [400]],
    [
      'huge header',
      () => raw(`GET /api/jobs HTTP/1.1\r\nx: ${'a'.repeat(20_000)}\r\n\r\n`),
      [400, 431],
    ],
  ];
  const total = 3000;
  const wrong: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < total) {
      const [name, run, expected] = kinds[next++ % kinds.length]!;
      const status = await run();
      if (!expected.includes(status) && wrong.length < 10) wrong.push(`${name}: ${status}`);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  assert.equal(wrong, [], 'every malformed request gets its 4xx');
  assert.is((await send('GET', '/api/jobs')).status, 200, 'the head still serves');
  const after = memory();
  console.log(
    `  ${total} malformed requests: VmRSS ${mib(startRss)} → ${mib(after.rss)}, VmHWM ${mib(after.hwm)}`,
  );
  assert.ok(
    after.rss - startRss < 64 * MiB,
    `resident memory ${mib(after.rss)}, from ${mib(startRss)} at start`,
  );
});

test.run();
