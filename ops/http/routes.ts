/**
 * The REST API under `/api/` (and Prometheus text at `/metrics`): one handler per route of the
 * contract (`contract.ts`), so the compiler checks that every route is served and that each
 * reply has the contract's shape. The server authenticates every request before it gets here.
 *
 * @module
 */
import { existsSync, rmSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';

import { diagnoseJob } from '../diagnose.ts';
import { OpsError } from '../jobs/errors.ts';
import { LedgerStore, type LedgerEntryRecord } from '../jobs/ledger-store.ts';
import {
  type JobInfo,
  type JobReport,
  type JobSample,
  OpsStore,
  sampleLimits,
  terminalJobStatuses,
} from '../jobs/ops-store.ts';
import type { JobSubmitRequest } from '../jobs/supervisor.ts';
import {
  isPackageHash,
  keepArchive,
  PackageTooLargeError,
  unpackArchive,
} from '../../runtime/packages/working-dir.ts';
import { readLogRange } from '../logs/log-file.ts';
import { readActorLogs } from '../logs/worker-logs.ts';
import { actorSortKeys, type ClusterView, queryActors } from './cluster-view.ts';
import {
  type ActorPageQuery,
  type BodyOf,
  type ClusterStatus,
  eventsPath,
  matchRoute,
  type MetricsTable,
  type PathParams,
  type QueryOf,
  type ReadOnlySession,
  type ReplyOf,
  type RouteKey,
} from './contract.ts';
import { renderPrometheus } from './prometheus.ts';
import type { Schema } from '../../runtime/schema.ts';
import { bodySchemas } from './rest-schemas.ts';
import { readBody, readJson, send, toCsv } from './respond.ts';

const version = '0.1.0';

/** What the API needs of a job supervisor (a live head's `JobSupervisor`, or a read-only session's stand-in). */
export interface JobsApi {
  get(jobId: string): JobInfo;
  submit(req: JobSubmitRequest): JobInfo;
  stop(jobId: string): Promise<JobInfo>;
  delete(jobId: string): void;
  packagePath(hash: string): string;
  on(event: 'job', listener: (job: JobInfo) => void): unknown;
  off(event: 'job', listener: (job: JobInfo) => void): unknown;
}

export type { ReadOnlySession };

/** What the routes need from the server. */
export interface RouteContext {
  store: OpsStore;
  jobs: JobsApi;
  /** Set when serving a finished session: every request but GET is refused with READ_ONLY. */
  readOnly?: ReadOnlySession;
  cluster: ClusterView;
  maxPackageBytes: number;
  headAddress?: string;
  /** The server's own URL (known once it listens). */
  url(): string;
  /** Keeps `res` open as a server-sent-events stream. */
  subscribe(req: IncomingMessage, res: ServerResponse): void;
  /**
   * A job logged metrics, samples or its report (live subscribers hear of it, throttled);
   * `fromStep` is the smallest step of the metric rows stored.
   */
  metricsChanged(jobId: string, fromStep?: number): void;
  /** Anything outside `/api/` and `/metrics`: the dashboard's files (gzipped when accepted). */
  serveStatic(req: IncomingMessage, res: ServerResponse, pathname: string): void;
}

/** Reads the query of route `K` by the contract's names, so a renamed parameter fails to compile. */
interface QueryReader<Q> {
  str(name: keyof Q & string): string | undefined;
  int(name: keyof Q & string): number | undefined;
}

/** One request, as a handler of route `K` sees it. */
interface Request<K extends RouteKey> {
  params: PathParams<K>;
  query: QueryReader<NonNullable<QueryOf<K>>>;
  /** The JSON body, checked against the route's schema (`rest-schemas.ts`); none for an upload. */
  body: BodyOf<K> extends Uint8Array ? undefined : BodyOf<K>;
  /** The request itself, for a body the handler streams (an upload). */
  http: IncomingMessage;
}

/** A text reply may come page by page, written as it is produced. */
type HandlerReply<K extends RouteKey> = ReplyOf<K> extends string ? Iterable<string> : ReplyOf<K>;

type Handlers = {
  [K in RouteKey]: (req: Request<K>) => Promise<HandlerReply<K>> | HandlerReply<K>;
};

/** Working-dir uploads the head takes at once; more are refused with 429 (`BUSY`). */
const maxConcurrentUploads = 2;
let uploadsInProgress = 0;
let uploadSeq = 0;

/** The request handler of the API. */
export function apiRoutes(
  ctx: RouteContext,
): (req: IncomingMessage, res: ServerResponse, u: URL) => Promise<void> {
  const { store, jobs, cluster, maxPackageBytes } = ctx;
  const ledger = new LedgerStore(store.db);

  const actor = (actorId: string) => {
    const a = cluster.actors().find((x) => x.actorId === actorId);
    if (!a) throw new OpsError('UNKNOWN_ACTOR', `no actor with id ${actorId}`);
    return a;
  };

  const actorQuery = (q: QueryReader<ActorPageQuery>) => {
    const sort = q.str('sort');
    if (sort !== undefined && !(actorSortKeys as readonly string[]).includes(sort)) {
      throw new OpsError('BAD_REQUEST', `sort must be one of ${actorSortKeys.join(', ')}`);
    }
    return {
      offset: q.int('offset'),
      limit: q.int('limit'),
      sort: sort as ActorPageQuery['sort'],
      order: q.str('order') === 'asc' ? ('asc' as const) : ('desc' as const),
      state: q.str('state') as ActorPageQuery['state'],
      jobId: q.str('jobId'),
      className: q.str('className'),
      nodeId: q.str('nodeId'),
      q: q.str('q'),
    };
  };

  const clusterStatus = (): ClusterStatus => {
    const nodes = cluster.nodes();
    const total: Record<string, number> = {};
    const used: Record<string, number> = {};
    for (const n of nodes.filter((x) => x.state === 'ALIVE')) {
      for (const [k, v] of Object.entries(n.resourcesTotal)) {
        total[k] = (total[k] ?? 0) + v;
        used[k] = (used[k] ?? 0) + v - (n.resourcesAvailable[k] ?? v);
      }
    }
    const actorsByState: Record<string, number> = {};
    for (const x of cluster.actors()) actorsByState[x.state] = (actorsByState[x.state] ?? 0) + 1;
    const jobsByStatus: Record<string, number> = {};
    for (const j of store.listJobs()) jobsByStatus[j.status] = (jobsByStatus[j.status] ?? 0) + 1;
    return {
      headAddress: ctx.headAddress ?? null,
      dashboardUrl: ctx.url(),
      nodes,
      resources: { total, used },
      actorsByState,
      jobsByStatus,
    };
  };

  const handlers: Handlers = {
    'GET /api/version': () => ({ version, readOnly: ctx.readOnly ?? null }),
    'GET /api/cluster': () => clusterStatus(),
    'GET /api/nodes': () => ({ nodes: cluster.nodes() }),
    'GET /api/placement-groups': () => ({ placementGroups: cluster.placementGroups?.() ?? [] }),
    'GET /api/placement-groups/:pgId': ({ params }) => {
      const pg = (cluster.placementGroups?.() ?? []).find((p) => p.pgId === params.pgId);
      if (!pg) throw new OpsError('UNKNOWN_PLACEMENT_GROUP', `no placement group ${params.pgId}`);
      return pg;
    },
    'GET /api/cluster-events': ({ query }) => ({
      events: store.listEvents({ subject: query.str('subject'), limit: query.int('limit') }),
    }),
    'GET /api/packages/:hash': ({ params }) => {
      if (!existsSync(packageDir(params.hash))) {
        throw new OpsError('UNKNOWN_PACKAGE', `no package ${params.hash} on this head`);
      }
      return { exists: true };
    },
    'PUT /api/packages/:hash': async ({ params, http }) => {
      const dir = packageDir(params.hash);
      // Streamed to disk, a few at a time: memory does not grow with concurrent uploads.
      if (uploadsInProgress >= maxConcurrentUploads) {
        throw new OpsError(
          'BUSY',
          `${maxConcurrentUploads} uploads are in progress; try again shortly`,
        );
      }
      uploadsInProgress++;
      const tmp = `${dir}.upload-${process.pid}-${++uploadSeq}`;
      try {
        await readBody(http, maxPackageBytes, tmp);
        if (!existsSync(dir)) {
          try {
            await unpackArchive(tmp, params.hash, dir, maxPackageBytes * 4);
          } catch (err) {
            if (err instanceof PackageTooLargeError)
              throw new OpsError('PACKAGE_TOO_LARGE', err.message);
            throw new OpsError('BAD_REQUEST', `bad package: ${(err as Error).message}`);
          }
        }
        // Kept as uploaded for nodes that run the job's actors and fetch it from the head.
        keepArchive(dir, tmp);
      } finally {
        uploadsInProgress--;
        rmSync(tmp, { force: true });
      }
      return { uri: `pkg://${params.hash}` };
    },
    'GET /api/jobs': ({ query }) => {
      const list = store.listJobs({ limit: query.int('limit') });
      const progress = store.progress(
        list.map((j) => j.jobId),
        runningIds(list),
      );
      return { jobs: list.map((j) => ({ ...j, progress: progress.get(j.jobId) })) };
    },
    'POST /api/jobs': ({ body }) => {
      const job = jobs.submit(body);
      return { jobId: job.jobId, job };
    },
    'GET /api/jobs/:jobId': ({ params }) => {
      const job = jobs.get(params.jobId);
      const progress = store.progress([job.jobId], runningIds([job])).get(job.jobId);
      return { ...job, progress, report: store.report(job.jobId) };
    },
    'DELETE /api/jobs/:jobId': ({ params }) => {
      jobs.delete(params.jobId);
      return { deleted: true };
    },
    'POST /api/jobs/:jobId/stop': async ({ params, query }) => {
      const before = jobs.get(params.jobId);
      const done = jobs.stop(params.jobId);
      const job = query.int('wait') === 0 ? jobs.get(params.jobId) : await done;
      return { stopped: !terminalJobStatuses.has(before.status), job };
    },
    'GET /api/jobs/:jobId/logs': ({ params, query }) => {
      const job = jobs.get(params.jobId);
      const { data, nextOffset, size } = readLogRange(job.logPath, query.int('offset') ?? 0);
      return { logs: data.toString('utf8'), nextOffset, size, status: job.status };
    },
    'GET /api/jobs/:jobId/metrics': ({ params, query }) => {
      jobs.get(params.jobId);
      const maxPoints = query.int('maxPoints');
      if (maxPoints === undefined)
        return store.metricsTable(params.jobId, query.int('sinceStep'), query.int('limit'));
      return {
        ...OpsStore.downsample(wholeMetricsTable(params.jobId, query.int('sinceStep')), maxPoints),
        nextSinceStep: null,
      };
    },
    'GET /api/jobs/:jobId/metrics.csv': ({ params, query }) => {
      jobs.get(params.jobId);
      return metricsCsv(params.jobId, query.int('sinceStep'));
    },
    'POST /api/jobs/:jobId/metrics': ({ params, body }) => {
      jobs.get(params.jobId);
      const clean = body.rows.map((row) => ({
        step: row.step,
        values: row.values,
        time: row.time ?? Date.now(),
      }));
      store.addMetrics(params.jobId, clean);
      // A row may land on a step the page already has (train_ppo logs a step's episode metrics,
      // then its update metrics), so the event says which steps to read again.
      if (clean.length > 0) ctx.metricsChanged(params.jobId, Math.min(...clean.map((r) => r.step)));
      else ctx.metricsChanged(params.jobId);
      return { stored: clean.length };
    },
    'GET /api/jobs/:jobId/samples': ({ params, query }) => {
      jobs.get(params.jobId);
      const steps = store.sampleSteps(params.jobId);
      const key = query.str('key');
      const step = query.int('step') ?? (key === undefined ? steps.at(-1) : undefined);
      const samples =
        steps.length === 0
          ? []
          : store.samples(params.jobId, {
              ...(step !== undefined ? { step } : {}),
              ...(key !== undefined ? { key } : {}),
              minScore: query.int('minScore'),
              maxScore: query.int('maxScore'),
              limit: query.int('limit'),
            });
      return { steps, step: step ?? null, samples };
    },
    'POST /api/jobs/:jobId/samples': ({ params, body }) => {
      jobs.get(params.jobId);
      // The body schema (rest-schemas.ts) has checked the shape; the store checks the sizes.
      const { step, samples } = body as { step: number; samples: JobSample[] };
      store.addSamples(params.jobId, step, samples);
      ctx.metricsChanged(params.jobId);
      return { stored: samples.length };
    },
    'GET /api/jobs/:jobId/ledger': ({ params, query }) => {
      jobs.get(params.jobId);
      const entries = ledger.list(params.jobId, {
        offset: query.int('offset'),
        limit: query.int('limit'),
      });
      return { entries };
    },
    'POST /api/jobs/:jobId/ledger': ({ params, body }) => {
      jobs.get(params.jobId);
      const { entries } = body as { entries: LedgerEntryRecord[] };
      for (const e of entries)
        if (typeof e.id !== 'string' || typeof e.status !== 'string')
          throw new OpsError('BAD_REQUEST', 'every ledger entry has a string id and status');
      return { stored: ledger.add(params.jobId, entries) };
    },
    'GET /api/jobs/:jobId/report': ({ params }) => {
      jobs.get(params.jobId);
      return store.report(params.jobId);
    },
    'GET /api/jobs/:jobId/diagnosis': ({ params }) => {
      jobs.get(params.jobId);
      return diagnoseJob(
        wholeMetricsTable(params.jobId, undefined),
        store.report(params.jobId).config ?? [],
      );
    },
    'POST /api/jobs/:jobId/report': ({ params, body }) => {
      jobs.get(params.jobId);
      if (
        body.totalSteps !== undefined &&
        (typeof body.totalSteps !== 'number' || !(body.totalSteps >= 0))
      ) {
        throw new OpsError('BAD_REQUEST', 'totalSteps must be a non-negative number');
      }
      if (body.config !== undefined && !Array.isArray(body.config))
        throw new OpsError('BAD_REQUEST', 'config must be an array of rows');
      const c = body.checkpoint as { step?: unknown; resumeFlags?: unknown } | undefined;
      if (
        c !== undefined &&
        (typeof c !== 'object' ||
          c === null ||
          typeof c.step !== 'number' ||
          !(c.step >= 0) ||
          typeof c.resumeFlags !== 'string')
      ) {
        throw new OpsError(
          'BAD_REQUEST',
          'checkpoint must be { step: a non-negative number, resumeFlags: a string }',
        );
      }
      const roles = body.roles as Record<string, { fate?: unknown }> | undefined;
      if (
        roles !== undefined &&
        (typeof roles !== 'object' ||
          roles === null ||
          Object.values(roles).some((r) => typeof r?.fate !== 'string'))
      ) {
        throw new OpsError('BAD_REQUEST', 'roles must map class names to { fate: a string }');
      }
      const report = store.mergeReport(params.jobId, body as JobReport);
      ctx.metricsChanged(params.jobId);
      return report;
    },
    'GET /api/jobs/:jobId/actors': ({ params, query }) => {
      jobs.get(params.jobId);
      return queryActors(cluster.actors(), { ...actorQuery(query), jobId: params.jobId });
    },
    'GET /api/actors': ({ query }) => queryActors(cluster.actors(), actorQuery(query)),
    'GET /api/actors/:actorId': ({ params }) => actor(params.actorId),
    'POST /api/actors/:actorId/kill': async ({ params, body }) => {
      actor(params.actorId);
      await cluster.killActor(params.actorId, { noRestart: body.noRestart !== false });
      return { killed: true };
    },
    'POST /api/actors/:actorId/restart': async ({ params }) => {
      actor(params.actorId);
      if (!cluster.restartActor)
        throw new OpsError('UNSUPPORTED', 'this head cannot restart actors');
      await cluster.restartActor(params.actorId);
      return { restarting: true };
    },
    'GET /api/actors/:actorId/logs': ({ params, query }) => {
      const a = actor(params.actorId);
      const files = store.findLogFiles({ actorId: params.actorId });
      const live = a.state === 'DEAD' ? undefined : a.incarnation;
      const page = readActorLogs(files, query.str('cursor'), { liveIncarnation: live });
      return { ...page, state: a.state };
    },
  };
  const routeKeys = Object.keys(handlers) as RouteKey[];

  /** Every page of a job's metrics as CSV, produced as it is read: memory stays one page. */
  function* metricsCsv(jobId: string, sinceStep: number | undefined): Iterable<string> {
    let page = store.metricsTable(jobId, sinceStep);
    yield toCsv(page.columns, page.rows);
    const columns = page.columns;
    while (page.nextSinceStep !== null) {
      // Later pages name a subset of the first page's metrics: keep the first's columns.
      page = store.metricsTable(jobId, page.nextSinceStep);
      const at = columns.map((c) => page.columns.indexOf(c));
      const rows = page.rows.map((r) => at.map((i) => (i < 0 ? null : (r[i] ?? null))));
      yield toCsv(columns, rows).replace(/^[^\n]*\n/, '');
    }
  }
  /** Every page of a job's metrics as one table (for downsampling: the result is bounded by it). */
  function wholeMetricsTable(jobId: string, sinceStep: number | undefined): MetricsTable {
    let page = store.metricsTable(jobId, sinceStep);
    const columns = page.columns;
    const rows = [...page.rows];
    while (page.nextSinceStep !== null) {
      page = store.metricsTable(jobId, page.nextSinceStep);
      const at = columns.map((c) => page.columns.indexOf(c));
      rows.push(...page.rows.map((r) => at.map((i) => (i < 0 ? null : (r[i] ?? null)))));
    }
    return { ...page, columns, rows, nextSinceStep: null };
  }
  const runningIds = (list: readonly JobInfo[]) =>
    new Set(list.filter((j) => j.status === 'RUNNING').map((j) => j.jobId));

  const packageDir = (hash: string): string => {
    if (!isPackageHash(hash))
      throw new OpsError('BAD_REQUEST', 'package id must be a sha256 hex digest');
    return jobs.packagePath(hash);
  };

  const reader = (u: URL): QueryReader<Record<string, unknown>> => ({
    str: (name) => u.searchParams.get(name) || undefined,
    int: (name) => {
      const v = u.searchParams.get(name);
      if (v === null || v === '') return undefined;
      const n = Number(v);
      if (!Number.isFinite(n)) throw new OpsError('BAD_REQUEST', `${name} must be a number`);
      return n;
    },
  });

  return async (req, res, u) => {
    const method = req.method ?? 'GET';
    if (u.pathname === '/metrics' && method === 'GET') {
      const running = store.listJobs({ status: ['RUNNING'] }).map((j) => j.jobId);
      const text = renderPrometheus({
        nodes: cluster.nodes(),
        actors: cluster.actors(),
        jobs: store.listJobs(),
        callsTotal: cluster.callsTotal?.(),
        jobMetrics: store.latestMetrics(running),
      });
      send(res, 200, text, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
      return;
    }
    if (!u.pathname.startsWith('/api/') && u.pathname !== '/api')
      return ctx.serveStatic(req, res, u.pathname);
    if (u.pathname === eventsPath && method === 'GET') return ctx.subscribe(req, res);

    if (ctx.readOnly && method !== 'GET' && method !== 'HEAD') {
      throw new OpsError(
        'READ_ONLY',
        `this is a finished session (${ctx.readOnly.sessionDir}), served read-only`,
      );
    }
    const hit = matchRoute(routeKeys, method, u.pathname);
    if (!hit) throw new OpsError('NOT_FOUND', `no route ${method} ${u.pathname}`);
    const schema = bodySchemas[hit.key as keyof typeof bodySchemas] as Schema<unknown> | undefined;
    // A step's samples may hold up to maxPerStep samples of up to maxSampleBytes each.
    const jsonLimit =
      hit.key === 'POST /api/jobs/:jobId/samples'
        ? sampleLimits.maxPerStep * sampleLimits.maxSampleBytes
        : undefined;
    const body = schema ? await readJson(req, schema, jsonLimit) : undefined;
    const handler = handlers[hit.key] as (r: Request<RouteKey>) => unknown;
    const request = { params: hit.params, query: reader(u), body, http: req };
    const reply = await handler(request as unknown as Request<RouteKey>);
    if (typeof reply === 'object' && reply !== null && Symbol.iterator in reply) {
      res.writeHead(200, {
        'content-type': 'text/csv; charset=utf-8',
        'cache-control': 'no-store',
      });
      for (const chunk of reply as Iterable<string>) res.write(chunk);
      res.end();
    } else send(res, 200, reply);
  };
}
