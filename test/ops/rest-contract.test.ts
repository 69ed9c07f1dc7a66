// The REST contract (ops/http/contract.ts) against a real head's HTTP server: every
// route the clients use answers through the typed client, errors arrive with their code, and
// the server serves exactly the contract's routes.
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import {
  fetchTransport,
  matchRoute,
  RestError,
  restClient,
  type RestClient,
  type RouteKey,
  routePath,
} from '../../ops/http/contract.ts';
import { type Ops, startOps } from '../../ops/http/ops.ts';
import { packDir } from '../../runtime/packages/working-dir.ts';

const token = 'contract-token-0123456789abcdef';
const dir = mkdtempSync(join(tmpdir(), 'rtjob-contract-'));
let ops: Ops;
let api: RestClient;

test.before(async () => {
  ops = await startOps({ sessionDir: dir, token, dashboardPort: 0, dashboard: false });
  api = restClient(fetchTransport(ops.http.url, { authorization: `Bearer ${token}` }));
});
test.after(async () => {
  await ops.close({ stopJobs: true });
  rmSync(dir, { recursive: true, force: true });
});

const refusal = async (p: Promise<unknown>): Promise<RestError> => {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof RestError, String(e));
    return e;
  }
  throw new Error('expected a refusal');
};

test('routePath fills and encodes parameters and drops empty query values', () => {
  assert.is(
    routePath('GET /api/jobs/:jobId/logs', { params: { jobId: 'a b/c' }, query: { offset: 5 } }),
    '/api/jobs/a%20b%2Fc/logs?offset=5',
  );
  assert.is(
    routePath('GET /api/actors', { query: { q: '', state: undefined, limit: 3 } }),
    '/api/actors?limit=3',
  );
  const keys: RouteKey[] = ['GET /api/jobs/:jobId', 'GET /api/jobs/:jobId/metrics.csv'];
  assert.equal(matchRoute(keys, 'GET', '/api/jobs/a%20b'), {
    key: 'GET /api/jobs/:jobId',
    params: { jobId: 'a b' },
  });
  assert.is(
    matchRoute(keys, 'HEAD', '/api/jobs/x/metrics.csv')?.key,
    'GET /api/jobs/:jobId/metrics.csv',
  );
  assert.is(matchRoute(keys, 'POST', '/api/jobs/x'), undefined);
});

test('a job round trip through the typed client: submit, get, logs, metrics, stop, delete', async () => {
  const { jobId, job } = await api.call('POST /api/jobs', {
    body: { entrypoint: ['sh', '-c', 'echo hello; sleep 30'], jobId: 'c1', env: { A: '1' } },
  });
  assert.is(jobId, 'c1');
  assert.is(job.env.A, '1');
  const { jobs } = await api.call('GET /api/jobs', { query: { limit: 5 } });
  assert.ok(jobs.some((j) => j.jobId === 'c1'));
  for (;;) {
    const logs = await api.call('GET /api/jobs/:jobId/logs', {
      params: { jobId },
      query: { offset: 0 },
    });
    if (logs.logs.includes('hello')) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const stored = await api.call('POST /api/jobs/:jobId/metrics', {
    params: { jobId },
    body: {
      rows: [
        { step: 1, values: { reward: 0.5 } },
        { step: 2, values: { reward: 0.75 } },
      ],
    },
  });
  assert.is(stored.stored, 2);
  const table = await api.call('GET /api/jobs/:jobId/metrics', {
    params: { jobId },
    query: { sinceStep: 1 },
  });
  assert.equal(table.rows.length, 1);
  assert.ok(table.columns.includes('reward'));
  const csv = await api.call('GET /api/jobs/:jobId/metrics.csv', { params: { jobId } });
  assert.match(csv, /^step,.*reward/);
  assert.is(csv.trim().split('\n').length, 3);
  const stop = await api.call('POST /api/jobs/:jobId/stop', { params: { jobId } });
  assert.ok(stop.stopped);
  assert.is(stop.job.status, 'STOPPED');
  assert.equal(await api.call('DELETE /api/jobs/:jobId', { params: { jobId } }), { deleted: true });
  const gone = await refusal(api.call('GET /api/jobs/:jobId', { params: { jobId } }));
  assert.is(gone.status, 404);
  assert.is(gone.code, 'UNKNOWN_JOB');
});

test('packages: absent is a 404 with a code, an upload makes it present', async () => {
  const wd = join(dir, 'wd');
  mkdirSync(wd);
  writeFileSync(join(wd, 'main.ts'), 'console.log(1)\n');
  const p = packDir(wd);
  const params = { hash: p.hash };
  const absent = await refusal(api.call('GET /api/packages/:hash', { params }));
  assert.is(absent.status, 404);
  assert.is(absent.code, 'UNKNOWN_PACKAGE');
  assert.is(
    (await api.call('PUT /api/packages/:hash', { params, body: p.archive })).uri,
    `pkg://${p.hash}`,
  );
  assert.equal(await api.call('GET /api/packages/:hash', { params }), { exists: true });
  const bad = await refusal(api.call('GET /api/packages/:hash', { params: { hash: 'nope' } }));
  assert.is(bad.code, 'BAD_REQUEST');
});

test('cluster, nodes, actors and events answer in the contract shape', async () => {
  const s = await api.call('GET /api/cluster');
  assert.is(s.dashboardUrl, ops.http.url);
  assert.ok(s.nodes.length >= 1);
  assert.ok(Array.isArray((await api.call('GET /api/nodes')).nodes));
  const page = await api.call('GET /api/actors', {
    query: { limit: 10, sort: 'className', order: 'asc' },
  });
  assert.equal([page.total, page.offset, page.limit], [0, 0, 10]);
  assert.ok(
    Array.isArray((await api.call('GET /api/cluster-events', { query: { limit: 5 } })).events),
  );
  assert.is((await api.call('GET /api/version')).version, '0.1.0');
  const badSort = await refusal(api.call('GET /api/actors', { query: { sort: 'bogus' as 'pid' } }));
  assert.is(badSort.status, 400);
  const noActor = await refusal(api.call('GET /api/actors/:actorId', { params: { actorId: 'x' } }));
  assert.is(noActor.code, 'UNKNOWN_ACTOR');
});

test('a route outside the contract is a 404 with a code', async () => {
  const res = await fetch(`${ops.http.url}/api/nope`, {
    headers: { authorization: `Bearer ${token}` },
  });
  assert.is(res.status, 404);
  assert.is(((await res.json()) as { error: string }).error, 'NOT_FOUND');
});

test.run();
