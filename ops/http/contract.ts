/**
 * The head's REST contract: every route under `/api/` with its path parameters, query, body and
 * reply, in one table that the server (`routes.ts`), the CLI (`cli/client.ts`) and the dashboard
 * (`ops/dashboard/src/api.ts`) all compile against. The server implements the table as a
 * handler per key (a missing route or a reply of the wrong shape is a compile error), and the
 * clients call it through {@link restClient}, so a renamed field breaks every caller's build.
 * Pure: no Node imports, so the dashboard bundle can include it.
 *
 * Outside the table, because they are not JSON request/reply: the live events stream
 * ({@link eventsPath}, server-sent events), the job log tail ({@link logTailPath}, WebSocket),
 * `/login` and Prometheus text at `/metrics`.
 *
 * @module
 */
import { RtjobError, InvalidArgumentError } from '../../runtime/errors.ts';
import type { PlacementGroupInfo } from '../../runtime/protocol.ts';
import type { AgentTrace } from '../../runtime/agent-trace.ts';
import type { Diagnosis, NoDiagnosis } from '../diagnose.ts';
import type {
  ChartLayout,
  ClusterEvent,
  ConfigRow,
  JobInfo,
  JobProgress,
  JobCheckpoint,
  JobReport,
  JobSample,
  JobStatus,
  MetricRow,
  MetricsTable,
  StoredSample,
  SummaryCard,
} from '../jobs/ops-store.ts';
import type { LedgerEntryRecord } from '../jobs/ledger-store.ts';
import type { JobSubmitRequest } from '../jobs/supervisor.ts';
import type { ActorLogPage } from '../logs/worker-logs.ts';
import type {
  ActorPage,
  ActorQuery,
  ActorSortKey,
  ActorState,
  ActorView,
  NodeView,
  ProcessView,
} from './cluster-view.ts';

export type {
  LedgerEntryRecord,
  ChartLayout,
  ConfigRow,
  JobCheckpoint,
  JobProgress,
  JobReport,
  JobSample,
  StoredSample,
  SummaryCard,
  ActorLogPage,
  ActorPage,
  ActorSortKey,
  ActorState,
  ActorView,
  ClusterEvent,
  JobInfo,
  JobStatus,
  JobSubmitRequest,
  MetricRow,
  MetricsTable,
  NodeView,
  PlacementGroupInfo,
  ProcessView,
};

/** `GET /api/cluster`. */
export interface ClusterStatus {
  headAddress: string | null;
  dashboardUrl: string;
  nodes: NodeView[];
  resources: { total: Record<string, number>; used: Record<string, number> };
  actorsByState: Record<string, number>;
  jobsByStatus: Record<string, number>;
}

/** A job in the list: with how far it is. */
export type JobListItem = JobInfo & { progress?: JobProgress };

/** One job: with its progress and what its driver reported (config, total steps, outputs). */
export type JobDetail = JobInfo & { progress?: JobProgress; report: JobReport };

/** `GET /api/jobs/:jobId/samples`: the steps that have samples, the step shown, its samples. */
export interface SamplesPage {
  steps: number[];
  /** The step shown; null when showing one prompt across steps (`key`), or when there are none. */
  step: number | null;
  samples: StoredSample[];
}

/**
 * One kept sample with train_ppo's episode fields, as the dashboard and `rtjob samples` read a
 * {@link StoredSample} (other jobs may send any fields).
 */
export interface SampleView {
  step: number;
  seq: number;
  key?: string;
  pick?: string;
  score?: number;
  prompt?: string;
  label?: string;
  turns?: {
    role: string;
    text: string;
    tokens: number;
    toolCalls?: { name: string; arguments: string }[];
  }[];
  extraInfo?: Record<string, string | number | boolean>;
  versionMin?: number;
  versionMax?: number;
  staleness?: number;
  stopReason?: string;
  promptTokens?: number;
  responseTokens?: number;
  groupScoreMean?: number;
  error?: string;
  /** The agent's OpenTelemetry spans joined to its model calls (`runtime/agent-trace.ts`). */
  trace?: AgentTrace;
}

/** A finished session served read-only (`rtjob dashboard` with no cluster running). */
export interface ReadOnlySession {
  /** The newest session served. */
  sessionDir: string;
  /** How many sessions the run history served joins (`sessionDir` and the older ones). */
  sessions: number;
}

/** Query of the actor table (`GET /api/actors`, `GET /api/jobs/:jobId/actors`). */
export type ActorPageQuery = ActorQuery;

/** The body of every non-2xx JSON answer. */
export interface ApiErrorBody {
  /** A stable code (`UNKNOWN_JOB`, `BAD_REQUEST`, `PACKAGE_TOO_LARGE`, …). */
  error: string;
  message: string;
}

/** What a route takes and gives; absent parts are empty. */
interface Route {
  query?: object;
  /** JSON, or `Uint8Array` for a raw upload. */
  body?: unknown;
  /** JSON, or `string` for a text answer. */
  reply: unknown;
}

/** Every route: `METHOD /path/:param`. */
export interface RestRoutes {
  /** `readOnly` is set when a finished session is served: every request but GET answers 405 `READ_ONLY`. */
  'GET /api/version': { reply: { version: string; readOnly: ReadOnlySession | null } };
  'GET /api/cluster': { reply: ClusterStatus };
  'GET /api/nodes': { reply: { nodes: NodeView[] } };
  'GET /api/placement-groups': { reply: { placementGroups: PlacementGroupInfo[] } };
  'GET /api/placement-groups/:pgId': { reply: PlacementGroupInfo };
  'GET /api/cluster-events': {
    query: { subject?: string; limit?: number };
    reply: { events: ClusterEvent[] };
  };
  /** Whether the head has the package (404 `PACKAGE_NOT_FOUND` when it has not). */
  'GET /api/packages/:hash': { reply: { exists: true } };
  /** Uploads a gzip'd tar working dir named by its content hash. */
  'PUT /api/packages/:hash': { body: Uint8Array; reply: { uri: string } };
  'GET /api/jobs': { query: { limit?: number }; reply: { jobs: JobListItem[] } };
  'POST /api/jobs': { body: JobSubmitRequest; reply: { jobId: string; job: JobInfo } };
  'GET /api/jobs/:jobId': { reply: JobDetail };
  'DELETE /api/jobs/:jobId': { reply: { deleted: true } };
  /** Stops the job; with `wait: 0` answers at once instead of when the driver is gone. */
  'POST /api/jobs/:jobId/stop': {
    query: { wait?: 0 | 1 };
    reply: { stopped: boolean; job: JobInfo };
  };
  'GET /api/jobs/:jobId/logs': {
    query: { offset?: number };
    reply: { logs: string; nextOffset: number; size: number; status: JobStatus };
  };
  /**
   * One page of steps after `sinceStep` (at most `limit`, and a bounded number of cells); with
   * `maxPoints`, the whole table downsampled to at most that many rows (bucket means, first and
   * last kept).
   */
  'GET /api/jobs/:jobId/metrics': {
    query: { sinceStep?: number; limit?: number; maxPoints?: number };
    reply: MetricsTable;
  };
  /** Every page of the table as CSV text, streamed. */
  'GET /api/jobs/:jobId/metrics.csv': { query: { sinceStep?: number }; reply: string };
  'POST /api/jobs/:jobId/metrics': {
    /** Non-finite values travel as `null`. */
    body: { rows: { step: number; values: Record<string, number | null>; time?: number }[] };
    reply: { stored: number };
  };
  /** `step` (default: the latest), or `key` (one prompt across steps); `minScore`, `maxScore`, `limit`. */
  'GET /api/jobs/:jobId/samples': {
    query: { step?: number; key?: string; minScore?: number; maxScore?: number; limit?: number };
    reply: SamplesPage;
  };
  /** Stores a step's samples, replacing what that step had (limits: `sampleLimits`). */
  'POST /api/jobs/:jobId/samples': {
    body: { step: number; samples: JobSample[] };
    reply: { stored: number };
  };
  'GET /api/jobs/:jobId/report': { reply: JobReport };
  /** The job's ledger entries in the order they first arrived (`ops/jobs/ledger-store.ts`). */
  'GET /api/jobs/:jobId/ledger': {
    query: { offset?: number; limit?: number };
    reply: { entries: LedgerEntryRecord[] };
  };
  /** Stores ledger entries: new ids appended, known ones replaced by their newer state. */
  'POST /api/jobs/:jobId/ledger': {
    body: { entries: LedgerEntryRecord[] };
    reply: { stored: number };
  };
  /** Which side limits the run and the setting to change first (`ops/diagnose.ts`). */
  'GET /api/jobs/:jobId/diagnosis': { reply: Diagnosis | NoDiagnosis };
  /** Merges fields into the job's report (`totalSteps`, `headline`, `config`, `outputs`, …). */
  'POST /api/jobs/:jobId/report': { body: JobReport; reply: JobReport };
  'GET /api/jobs/:jobId/actors': { query: Omit<ActorPageQuery, 'jobId'>; reply: ActorPage };
  'GET /api/actors': { query: ActorPageQuery; reply: ActorPage };
  'GET /api/actors/:actorId': { reply: ActorView };
  'POST /api/actors/:actorId/kill': { body: { noRestart?: boolean }; reply: { killed: true } };
  'POST /api/actors/:actorId/restart': { reply: { restarting: true } };
  'GET /api/actors/:actorId/logs': {
    query: { cursor?: string };
    reply: ActorLogPage & { state: ActorState };
  };
}

/** A route of the table. */
export type RouteKey = keyof RestRoutes;

/** `{ jobId: string }` for `'GET /api/jobs/:jobId/logs'`. */
export type PathParams<K extends string> = K extends `${string}:${infer P}/${infer Rest}`
  ? { [N in P]: string } & PathParams<`/${Rest}`>
  : K extends `${string}:${infer P}`
    ? { [N in P]: string }
    : Record<never, never>;

type Part<K extends RouteKey, F extends keyof Route> =
  RestRoutes[K] extends Record<F, infer T> ? T : undefined;

/** The query of route `K`. */
export type QueryOf<K extends RouteKey> = Part<K, 'query'>;
/** The body of route `K`. */
export type BodyOf<K extends RouteKey> = Part<K, 'body'>;
/** The reply of route `K`. */
export type ReplyOf<K extends RouteKey> = RestRoutes[K]['reply'];

/** What a call of route `K` passes: path parameters, query and body, each only where it has them. */
export type CallArgs<K extends RouteKey> = (keyof PathParams<K> extends never
  ? { params?: undefined }
  : { params: PathParams<K> }) &
  (QueryOf<K> extends undefined ? { query?: undefined } : { query?: QueryOf<K> }) &
  (BodyOf<K> extends undefined ? { body?: undefined } : { body: BodyOf<K> });

/** Every argument of a call is optional when the route needs none. */
type ArgsTuple<K extends RouteKey> = keyof PathParams<K> extends never
  ? BodyOf<K> extends undefined
    ? [args?: CallArgs<K>]
    : [args: CallArgs<K>]
  : [args: CallArgs<K>];

/** Splits a route key. */
export function splitRoute(key: RouteKey): { method: string; pattern: string } {
  const at = key.indexOf(' ');
  return { method: key.slice(0, at), pattern: key.slice(at + 1) };
}

/**
 * The URL path (and query string) of a call: parameters filled in, URI-encoded; query values
 * that are undefined or empty are left out.
 *
 * @example
 * routePath('GET /api/jobs/:jobId/logs', { params: { jobId: 'j 1' }, query: { offset: 5 } })
 * // '/api/jobs/j%201/logs?offset=5'
 */
export function routePath<K extends RouteKey>(key: K, args: Partial<CallArgs<K>> = {}): string {
  const params = (args.params ?? {}) as Record<string, string>;
  const path = splitRoute(key).pattern.replace(/:(\w+)/g, (_, name: string) => {
    const v = params[name];
    if (v === undefined) throw new InvalidArgumentError(`${key}: missing path parameter ${name}`);
    return encodeURIComponent(v);
  });
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries((args.query ?? {}) as Record<string, unknown>)) {
    if (v !== undefined && v !== '') q.set(k, String(v));
  }
  const qs = q.toString();
  return qs ? `${path}?${qs}` : path;
}

/** Matches a request against the table's patterns; the route and its decoded parameters. */
export function matchRoute(
  keys: readonly RouteKey[],
  method: string,
  pathname: string,
): { key: RouteKey; params: Record<string, string> } | undefined {
  const parts = pathname.split('/').filter(Boolean);
  for (const key of keys) {
    const route = splitRoute(key);
    if (route.method !== method && !(route.method === 'GET' && method === 'HEAD')) continue;
    const want = route.pattern.split('/').filter(Boolean);
    if (want.length !== parts.length) continue;
    const params: Record<string, string> = {};
    const ok = want.every((w, i) => {
      const got = parts[i]!;
      if (w.startsWith(':')) {
        params[w.slice(1)] = decodeURIComponent(got);
        return true;
      }
      return w === got;
    });
    if (ok) return { key, params };
  }
  return undefined;
}

/** A non-2xx answer of the API, with its stable `code` and the HTTP status. */
export class RestError extends RtjobError {
  override get name(): string {
    return 'RestError';
  }

  constructor(
    readonly status: number,
    code: string,
    message: string,
  ) {
    super(code, message);
  }
}

/**
 * Sends one request: `body` is JSON-encoded unless it is a `Uint8Array`. Resolves with the
 * status, content type and text of the answer; rejects only when the head cannot be reached.
 */
export type RestTransport = (req: {
  method: string;
  path: string;
  body: unknown;
}) => Promise<{ status: number; contentType: string; text: string }>;

/** A typed client of the REST API: `call(key, { params, query, body })`. */
export interface RestClient {
  /** Calls route `key`; throws {@link RestError} for a non-2xx answer. */
  call<K extends RouteKey>(key: K, ...args: ArgsTuple<K>): Promise<ReplyOf<K>>;
}

/**
 * Builds a client on a transport (`fetch` with the token header in the CLI, with the login
 * cookie in the dashboard).
 *
 * @example
 * const api = restClient(fetchTransport('http://127.0.0.1:8265', { authorization: `Bearer ${t}` }));
 * const { jobs } = await api.call('GET /api/jobs', { query: { limit: 8 } });
 */
export function restClient(send: RestTransport): RestClient {
  return {
    async call<K extends RouteKey>(key: K, ...rest: ArgsTuple<K>): Promise<ReplyOf<K>> {
      const args = (rest[0] ?? {}) as Partial<CallArgs<K>>;
      const res = await send({
        method: splitRoute(key).method,
        path: routePath(key, args),
        body: args.body,
      });
      const json = res.contentType.includes('application/json');
      if (res.status < 200 || res.status >= 300) {
        let err: Partial<ApiErrorBody> = {};
        try {
          err = json ? (JSON.parse(res.text) as ApiErrorBody) : {};
        } catch {
          // a proxy's HTML page: keep the status
        }
        throw new RestError(
          res.status,
          err.error ?? `HTTP_${res.status}`,
          err.message ?? (res.text.trim() || `HTTP ${res.status}`),
        );
      }
      return (json ? JSON.parse(res.text) : res.text) as ReplyOf<K>;
    },
  };
}

/**
 * A {@link RestTransport} over `fetch`: `base` is the head's URL (empty in the dashboard, which
 * is served by the head), `headers` carry the token where no cookie does.
 */
export function fetchTransport(
  base: string,
  headers: Record<string, string> = {},
  init: { credentials?: 'same-origin' } = {},
): RestTransport {
  return async ({ method, path, body }) => {
    const raw = body instanceof Uint8Array;
    const res = await fetch(`${base}${path}`, {
      method,
      ...init,
      headers: {
        ...headers,
        ...(body === undefined
          ? {}
          : { 'content-type': raw ? 'application/octet-stream' : 'application/json' }),
      },
      body: body === undefined ? undefined : raw ? new Uint8Array(body) : JSON.stringify(body),
    });
    return {
      status: res.status,
      contentType: res.headers.get('content-type') ?? '',
      text: await res.text(),
    };
  };
}

/** The live events stream (server-sent events `job`, `metrics`, `cluster`). */
export const eventsPath = '/api/events';

/** Data of a `metrics` event: a job stored metric rows, samples or its report. */
export interface MetricsEvent {
  jobId: string;
  /** The smallest step of the metric rows stored since the previous event (re-read from it). */
  fromStep?: number;
}

/** The WebSocket that follows a job's log from `offset`, closed when the job ends. */
export function logTailPath(jobId: string, offset?: number): string {
  const q = offset === undefined ? '' : `?offset=${offset}`;
  return `/api/jobs/${encodeURIComponent(jobId)}/logs/tail${q}`;
}
