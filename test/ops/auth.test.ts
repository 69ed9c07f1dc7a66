// Authentication of everything the head serves: REST, server-sent events, the WebSocket log
// tail, the login link and its cookie (with the cross-site guard), Prometheus text, and the
// runtime's own WebSocket endpoint. Without the token nothing runs.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import WebSocket from 'ws';

import { startHead } from '../../runtime/head/head.ts';
import { type Ops, startOps } from '../../ops/http/ops.ts';
import { connect } from '../../runtime/transport.ts';

const token = 'the-right-token-0123456789abcdef';
const dir = mkdtempSync(join(tmpdir(), 'rtjob-auth-'));
let ops: Ops;
let url: string;

test.before(async () => {
  ops = await startOps({ sessionDir: dir, token, dashboardPort: 0, dashboard: false });
  url = ops.http.url;
});
test.after(async () => {
  await ops.close({ stopJobs: true });
  rmSync(dir, { recursive: true, force: true });
});

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

test('REST: a missing or wrong token gets 401 and nothing runs', async () => {
  const wrong: Record<string, string>[] = [
    {},
    bearer('wrong'),
    bearer(''),
    { 'x-rtjob-token': 'wrong' },
    { cookie: 'rtjob_token=wrong' },
  ];
  for (const headers of wrong) {
    for (const [method, path] of [
      ['GET', '/api/jobs'],
      ['GET', '/api/cluster'],
      ['GET', '/api/actors'],
      ['GET', '/metrics'],
      ['GET', '/'],
    ] as const) {
      const res = await fetch(url + path, { method, headers });
      assert.is(res.status, 401, `${method} ${path} with ${JSON.stringify(headers)}`);
      assert.is(res.headers.get('www-authenticate'), 'Bearer realm="rtjob"');
      await res.arrayBuffer();
    }
    const post = await fetch(`${url}/api/jobs`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ entrypoint: ['true'], jobId: 'sneaky' }),
    });
    assert.is(post.status, 401);
  }
  assert.is(ops.store.getJob('sneaky'), undefined);
  const ok = await fetch(`${url}/api/jobs`, { headers: bearer(token) });
  assert.is(ok.status, 200);
  const alt = await fetch(`${url}/api/jobs`, { headers: { 'x-rtjob-token': token } });
  assert.is(alt.status, 200);
});

test('server-sent events need the token', async () => {
  const bad = await fetch(`${url}/api/events`, { headers: bearer('wrong') });
  assert.is(bad.status, 401);
  await bad.arrayBuffer();
  const ctl = new AbortController();
  const good = await fetch(`${url}/api/events`, { headers: bearer(token), signal: ctl.signal });
  assert.is(good.status, 200);
  assert.match(good.headers.get('content-type') ?? '', /text\/event-stream/);
  ctl.abort();
  await good.body?.cancel().catch(() => undefined);
});

function wsStatus(path: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url.replace(/^http/, 'ws') + path, { headers });
    ws.on('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      ws.terminate();
    });
    ws.on('open', () => {
      resolve(101);
      ws.close();
    });
    ws.on('error', (e) => reject(e));
  });
}

test('the WebSocket log tail needs the token, and a cookie only from our own origin', async () => {
  ops.jobs.submit({ entrypoint: ['true'], jobId: 'tail1' });
  await ops.jobs.waitFor('tail1');
  assert.is(await wsStatus('/api/jobs/tail1/logs/tail', {}), 401);
  assert.is(await wsStatus('/api/jobs/tail1/logs/tail', bearer('wrong')), 401);
  assert.is(
    await wsStatus('/api/jobs/tail1/logs/tail', {
      cookie: `rtjob_token=${token}`,
      origin: 'http://evil.example',
    }),
    403,
  );
  assert.is(await wsStatus('/api/jobs/tail1/logs/tail', bearer(token)), 101);
  assert.is(await wsStatus('/api/jobs/nope/logs/tail', bearer(token)), 404);
});

test('the login link sets an HttpOnly cookie; cross-site writes with it are refused', async () => {
  const bad = await fetch(`${url}/login?token=wrong`, { redirect: 'manual' });
  assert.is(bad.status, 401);
  await bad.arrayBuffer();
  const login = await fetch(`${url}/login?token=${encodeURIComponent(token)}`, {
    redirect: 'manual',
  });
  assert.is(login.status, 302);
  const cookie = login.headers.get('set-cookie') ?? '';
  assert.match(cookie, /HttpOnly/);
  assert.match(cookie, /SameSite=Strict/);
  const jar = cookie.split(';')[0]!;
  const read = await fetch(`${url}/api/jobs`, { headers: { cookie: jar } });
  assert.is(read.status, 200);
  const host = new URL(url).host;
  const cross = await fetch(`${url}/api/jobs`, {
    method: 'POST',
    headers: { cookie: jar, origin: 'http://evil.example', 'content-type': 'application/json' },
    body: JSON.stringify({ entrypoint: ['true'], jobId: 'csrf' }),
  });
  assert.is(cross.status, 403);
  assert.is(ops.store.getJob('csrf'), undefined);
  const same = await fetch(`${url}/api/jobs`, {
    method: 'POST',
    headers: { cookie: jar, origin: `http://${host}`, 'content-type': 'application/json' },
    body: JSON.stringify({ entrypoint: ['true'], jobId: 'same-origin' }),
  });
  assert.is(same.status, 200);
});

test("the runtime's WebSocket endpoint refuses a wrong token", async () => {
  const head = await startHead({ port: 0, token });
  try {
    const err = await connect(head.address, { token: 'wrong' }).then(
      () => undefined,
      (e: Error & { code?: string }) => e,
    );
    assert.ok(err, 'a wrong token must be refused');
    assert.is(err!.code, 'AUTH');
    const ok = await connect(head.address, { token });
    ok.close();
  } finally {
    await head.close();
  }
});

test.run();
