// Fuzzing every REST route: random and schema-broken bodies, odd ids and query strings. Every
// answer is a 4xx with a JSON error (never a 5xx, a reset or a hang), and the server keeps
// serving.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { type Ops, startOps } from '../../ops/http/ops.ts';
import { type RouteKey, splitRoute } from '../../ops/http/contract.ts';
import { bodySchemas } from '../../ops/http/rest-schemas.ts';
import type { Schema } from '../../runtime/schema.ts';
import { mutate, sample, seeded } from '../runtime/schema-fuzz.ts';

const token = 'rest-fuzz-token-0123456789abcdef';
const dir = mkdtempSync(join(tmpdir(), 'rtjob-rest-fuzz-'));
let ops: Ops;
const r = seeded(7);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;

test.before(async () => {
  ops = await startOps({
    sessionDir: dir,
    token,
    dashboardPort: 0,
    dashboard: false,
    maxPackageBytes: 64 * 1024,
  });
});
test.after(async () => {
  await ops.close({ stopJobs: true });
  rmSync(dir, { recursive: true, force: true });
});

const ids = ['j1', 'nope', '..', '%2e%2e', 'x'.repeat(300), '%00', 'a'.repeat(64)];
/** Every route of the contract, with the query it is fuzzed with (`:q` a random value). */
const fuzzed = [
  ['GET /api/version', ''],
  ['GET /api/cluster', ''],
  ['GET /api/nodes', ''],
  ['GET /api/placement-groups', ''],
  ['GET /api/placement-groups/:pgId', ''],
  ['GET /api/cluster-events', '?limit=:q'],
  ['GET /api/packages/:hash', ''],
  ['PUT /api/packages/:hash', ''],
  ['GET /api/jobs', '?limit=:q'],
  ['POST /api/jobs', ''],
  ['GET /api/jobs/:jobId', ''],
  ['DELETE /api/jobs/:jobId', ''],
  ['POST /api/jobs/:jobId/stop', '?wait=0'],
  ['GET /api/jobs/:jobId/logs', '?offset=:q'],
  ['GET /api/jobs/:jobId/metrics', '?sinceStep=:q&limit=:q&maxPoints=:q'],
  ['GET /api/jobs/:jobId/metrics.csv', '?sinceStep=:q'],
  ['POST /api/jobs/:jobId/metrics', ''],
  ['GET /api/jobs/:jobId/samples', '?step=:q&key=:q&minScore=:q'],
  ['POST /api/jobs/:jobId/samples', ''],
  ['GET /api/jobs/:jobId/report', ''],
  ['GET /api/jobs/:jobId/diagnosis', ''],
  ['POST /api/jobs/:jobId/report', ''],
  ['GET /api/jobs/:jobId/ledger', '?offset=:q&limit=:q'],
  ['POST /api/jobs/:jobId/ledger', ''],
  ['GET /api/jobs/:jobId/actors', '?sort=:q&limit=:q'],
  ['GET /api/actors', '?offset=:q&limit=:q&sort=:q&state=:q'],
  ['GET /api/actors/:actorId', ''],
  ['POST /api/actors/:actorId/kill', ''],
  ['POST /api/actors/:actorId/restart', ''],
  ['GET /api/actors/:actorId/logs', '?cursor=:q'],
] as const satisfies readonly (readonly [RouteKey, string])[];
// A route added to the contract and not fuzzed here fails to compile.
const everyRoute: Exclude<RouteKey, (typeof fuzzed)[number][0]> extends never ? true : never = true;
void everyRoute;

const routes: [string, string, Schema<unknown> | undefined][] = fuzzed.map(([key, query]) => {
  const { method, pattern } = splitRoute(key);
  const schema = bodySchemas[key as keyof typeof bodySchemas] as Schema<unknown> | undefined;
  return [method, pattern.replace(/:\w+/g, ':id') + query, schema];
});

function body(schema: Schema<unknown> | undefined): string | Uint8Array {
  const roll = r();
  if (schema && roll < 0.6) return JSON.stringify(mutate(sample(schema, r), schema, r));
  if (roll < 0.75)
    return JSON.stringify(
      pick([null, 1, 'x', [], { rows: 'no' }, { entrypoint: [] }, { noRestart: 'yes' }]),
    );
  if (roll < 0.9)
    return pick([
      '{',
      '{"a":',
      '\u0000',
      '1e309',
      '{"entrypoint":["true"],"entrypointNumCpus":1e309}',
    ]);
  return new Uint8Array(Math.floor(r() * 100_000));
}

test('random and broken requests to every route: only 4xx answers, and the server keeps serving', async () => {
  ops.jobs.submit({ entrypoint: ['true'], jobId: 'j1' });
  const seen = new Map<number, number>();
  for (let i = 0; i < 400; i++) {
    const [method, template, schema] = routes[i % routes.length]!;
    const path = template
      .replace(/:id/g, () => encodeURIComponent(pick(ids)))
      .replace(/:q/g, () =>
        encodeURIComponent(pick(['-1', '1e309', 'abc', '0', '99999999999', '', 'asc'])),
      );
    const init: RequestInit = {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    };
    if (method === 'POST' || method === 'PUT') init.body = body(schema) as BodyInit;
    const res = await fetch(ops.http.url + path, init);
    const text = await res.text();
    seen.set(res.status, (seen.get(res.status) ?? 0) + 1);
    assert.ok(
      res.status < 500 || res.status === 501,
      `${method} ${path} → ${res.status} ${text.slice(0, 200)}`,
    );
  }
  const v = await fetch(`${ops.http.url}/api/version`, {
    headers: { authorization: `Bearer ${token}` },
  });
  assert.is(v.status, 200);
  assert.ok((seen.get(400) ?? 0) > 50, JSON.stringify([...seen]));
});

test.run();
