/**
 * One schema per REST request body, checked before a route reads it (the same combinators as
 * the wire protocol, `runtime/schema.ts`). The job-submit schema is checked by the compiler
 * against `JobSubmitRequest`, so the API and the supervisor cannot drift.
 *
 * @module
 */
import { ledgerLimits } from '../jobs/ledger-store.ts';
import type { JobSubmitRequest } from '../jobs/supervisor.ts';
import type { BodyOf, RouteKey } from './contract.ts';
import {
  any,
  type Infer,
  type Schema,
  type SameShape,
  arr,
  bool,
  int,
  nullable,
  num,
  obj,
  oneOf,
  opt,
  record,
  str,
} from '../../runtime/schema.ts';

const arg = str({ max: 64 * 1024 });
const env = record(str({ max: 128 * 1024 }), 4096);

/** `POST /api/jobs`. */
export const jobSubmitBody = obj({
  entrypoint: oneOf(str({ min: 1, max: 64 * 1024 }), arr(arg, 4096, 1)),
  jobId: opt(str({ max: 128 })),
  workingDir: opt(str({ pattern: /^pkg:\/\/[0-9a-f]{64}$/ })),
  cwd: opt(str({ max: 4096 })),
  env: opt(env),
  inheritedEnv: opt(env),
  metadata: opt(record(str({ max: 4096 }), 256)),
  entrypointNumCpus: opt(num({ min: 0, max: 1e6 })),
  entrypointNumGpus: opt(num({ min: 0, max: 1e4 })),
});
const submitMatches: SameShape<Infer<typeof jobSubmitBody>, JobSubmitRequest> = true;
void submitMatches;

/** `POST /api/jobs/:id/metrics`: non-finite values travel as `null`. */
export const metricsBody = obj({
  rows: arr(
    obj({
      step: int({ min: -(2 ** 53 - 1) }),
      values: record(nullable(num()), 1000),
      time: opt(num({ min: 0 })),
    }),
    100_000,
  ),
});

/** `POST /api/jobs/:id/samples`: a step's sample episodes (free-form records; sizes bounded by the store). */
export const samplesBody = obj({
  step: int({ min: 0 }),
  samples: arr(record(any(), 4096), 256),
});

/** `POST /api/jobs/:id/ledger`: entries with an id and a status (sizes bounded by the store). */
export const ledgerBody = obj({
  entries: arr(record(any(), 64), ledgerLimits.maxPerRequest),
});

/** `POST /api/jobs/:id/report`: what a driver says about its job (free-form fields, merged by name). */
export const reportBody = record(any(), 4096);

/** `POST /api/actors/:id/kill`. */
export const killBody = obj({ noRestart: opt(bool()) });

/**
 * The body schema of every route that takes a JSON body, by contract key; the server checks a
 * body against it before the route's handler runs (an upload streams instead).
 */
export const bodySchemas = {
  'POST /api/jobs': jobSubmitBody,
  'POST /api/jobs/:jobId/metrics': metricsBody,
  'POST /api/jobs/:jobId/samples': samplesBody as Schema<BodyOf<'POST /api/jobs/:jobId/samples'>>,
  'POST /api/jobs/:jobId/ledger': ledgerBody as Schema<BodyOf<'POST /api/jobs/:jobId/ledger'>>,
  'POST /api/jobs/:jobId/report': reportBody as Schema<BodyOf<'POST /api/jobs/:jobId/report'>>,
  'POST /api/actors/:actorId/kill': killBody,
} satisfies { [K in JsonBodyRoute]: Schema<BodyOf<K>> };

/** Routes whose body is JSON (every route with a body but the upload). */
type JsonBodyRoute = {
  [K in RouteKey]: BodyOf<K> extends undefined ? never : BodyOf<K> extends Uint8Array ? never : K;
}[RouteKey];
