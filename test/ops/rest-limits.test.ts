// Bounded REST input: every body is checked against its schema (400 naming the field), job
// resource requests against what the cluster has (D11), oversized uploads get their 413 rather
// than a reset connection (D12), and a job's metrics are capped in names and served in pages (D6).
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { type Ops, startOps } from '../../ops/http/ops.ts';

const token = 'rest-limits-token-0123456789abcdef';
const dir = mkdtempSync(join(tmpdir(), 'rtjob-rest-'));
let ops: Ops;
let url: string;
const auth = { authorization: `Bearer ${token}` };

test.before(async () => {
  ops = await startOps({
    sessionDir: dir,
    token,
    dashboardPort: 0,
    dashboard: false,
    maxPackageBytes: 1024 * 1024,
  });
  url = ops.http.url;
});
test.after(async () => {
  await ops.close({ stopJobs: true });
  rmSync(dir, { recursive: true, force: true });
});

async function post(
  path: string,
  body: string,
): Promise<{
  status: number;
  json: { error?: string; message?: string } & Record<string, unknown>;
}> {
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body,
  });
  return { status: res.status, json: (await res.json()) as never };
}

test('bodies are checked against their schema; the first bad field is named', async () => {
  const a = await post('/api/jobs', JSON.stringify({ entrypoint: 42 }));
  assert.is(a.status, 400);
  assert.match(a.json.message!, /body\.entrypoint/);
  const b = await post('/api/jobs', JSON.stringify({ entrypoint: ['true'], env: { A: 1 } }));
  assert.match(b.json.message!, /body\.env\.A: expected a string/);
  await post('/api/jobs', JSON.stringify({ entrypoint: ['true'], jobId: 'm' }));
  const c = await post(
    '/api/jobs/m/metrics',
    JSON.stringify({ rows: [{ step: 'x', values: {} }] }),
  );
  assert.is(c.status, 400);
  assert.match(c.json.message!, /body\.rows\[0\]\.step/);
});

test('D11: infinite or more CPUs than the cluster has are refused at submit, not left PENDING', async () => {
  const inf = await post('/api/jobs', '{"entrypoint":["true"],"entrypointNumCpus":1e309}');
  assert.is(inf.status, 400);
  assert.match(inf.json.message!, /entrypointNumCpus: expected a finite number/);
  const many = await post(
    '/api/jobs',
    JSON.stringify({ entrypoint: ['true'], entrypointNumCpus: cpus().length + 1 }),
  );
  assert.is(many.status, 400);
  assert.is(many.json.error, 'INFEASIBLE');
  assert.match(many.json.message!, /asks for \d+ CPUs/);
});

test('D12: an oversized upload gets the 413, not a reset connection', async () => {
  // Sent as a stream: no content-length to refuse up front, so the limit is hit while reading.
  let sent = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(ctl) {
      if (sent >= 3 * 1024 * 1024) return ctl.close();
      sent += 64 * 1024;
      ctl.enqueue(new Uint8Array(64 * 1024));
    },
  });
  const init = { method: 'PUT', headers: auth, body, duplex: 'half' } as RequestInit;
  const res = await fetch(`${url}/api/packages/${'a'.repeat(64)}`, init);
  assert.is(res.status, 413);
  assert.match(((await res.json()) as { message: string }).message, /over the 1048576-byte limit/);
  const again = await fetch(`${url}/api/jobs`, { headers: auth });
  assert.is(again.status, 200, 'the server carries on');
});

test('D6: a job may log at most 1000 metric names; the table is served in pages (JSON) or streamed whole (CSV)', async () => {
  await post('/api/jobs', JSON.stringify({ entrypoint: ['true'], jobId: 'many' }));
  const rows = Array.from({ length: 1000 }, (_, step) => ({
    step,
    values: { [`m${step}`]: step },
  }));
  assert.is((await post('/api/jobs/many/metrics', JSON.stringify({ rows }))).status, 200);
  const over = await post(
    '/api/jobs/many/metrics',
    JSON.stringify({ rows: [{ step: 1000, values: { extra: 1 } }] }),
  );
  assert.is(over.status, 400);
  assert.match(over.json.message!, /1001 distinct metric names; the limit is 1000/);
  assert.is(
    (
      await post(
        '/api/jobs/many/metrics',
        JSON.stringify({ rows: [{ step: 1000, values: { m0: 1 } }] }),
      )
    ).status,
    200,
  );

  const page = (await (
    await fetch(`${url}/api/jobs/many/metrics?limit=100`, { headers: auth })
  ).json()) as {
    columns: string[];
    rows: unknown[][];
    nextSinceStep: number | null;
  };
  assert.is(page.rows.length, 100);
  assert.is(page.nextSinceStep, 99);
  const csv = await (await fetch(`${url}/api/jobs/many/metrics.csv`, { headers: auth })).text();
  const lines = csv.trim().split('\n');
  assert.is(lines.length, 1 + 1001, 'header and every step');
  assert.is(lines[0]!.split(',').length, 2 + 1000);
});

test.run();
