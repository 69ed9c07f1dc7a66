/**
 * The REST API under `/api/` (and Prometheus text at `/metrics`): jobs, packages, metrics,
 * actors, nodes and cluster status. The server authenticates every request before it gets here.
 *
 * @module
 */
import { existsSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';

import { OpsError } from '../jobs/errors.ts';
import { type JobSample, OpsStore, sampleLimits, terminalJobStatuses } from '../jobs/ops-store.ts';
import type { JobInfo } from '../jobs/ops-store.ts';
import type { JobSubmitRequest } from '../jobs/supervisor.ts';
import { isPackageHash, keepArchive, PackageTooLargeError, unpackArchive } from '../jobs/working-dir.ts';
import { readLogRange } from '../logs/log-file.ts';
import { readActorLogs } from '../logs/worker-logs.ts';
import { type ActorQuery, actorSortKeys, type ActorState, type ClusterView, queryActors } from './cluster-view.ts';
import { renderPrometheus } from './prometheus.ts';
import { intParam, readBody, readJson, send, toCsv } from './respond.ts';

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

/** A finished session served read-only (`rtjob dashboard` with no cluster running). */
export interface ReadOnlySession {
  sessionDir: string;
}

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
  /** A job logged metrics (live subscribers hear of it, throttled). */
  metricsChanged(jobId: string): void;
  /** Anything outside `/api/` and `/metrics`: the dashboard's files. */
  serveStatic(res: ServerResponse, pathname: string): void;
}

/** The request handler of the API. */
export function apiRoutes(ctx: RouteContext): (req: IncomingMessage, res: ServerResponse, u: URL) => Promise<void> {
  const { store, jobs, cluster, maxPackageBytes } = ctx;
  const route = async (req: IncomingMessage, res: ServerResponse, u: URL): Promise<void> => {
    const method = req.method ?? 'GET';
    const parts = u.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    const [a, b, c, d] = parts;

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
    if (a !== 'api') return ctx.serveStatic(res, u.pathname);
    if (ctx.readOnly && method !== 'GET' && method !== 'HEAD') {
      throw new OpsError('READ_ONLY', `this is a finished session (${ctx.readOnly.sessionDir}), served read-only`);
    }

    if (b === 'version') return send(res, 200, { version, readOnly: ctx.readOnly ?? null });
    if (b === 'events' && method === 'GET') {
      ctx.subscribe(req, res);
      return;
    }
    if (b === 'cluster' && method === 'GET') return send(res, 200, clusterStatus());
    if (b === 'nodes' && method === 'GET') return send(res, 200, { nodes: cluster.nodes() });
    if (b === 'placement-groups' && method === 'GET') {
      const all = cluster.placementGroups?.() ?? [];
      if (!c) return send(res, 200, { placementGroups: all });
      const pg = all.find((p) => p.pgId === c);
      if (!pg) throw new OpsError('UNKNOWN_PLACEMENT_GROUP', `no placement group ${c}`);
      return send(res, 200, pg);
    }
    if (b === 'cluster-events' && method === 'GET') {
      return send(res, 200, { events: store.listEvents({ subject: u.searchParams.get('subject') ?? undefined, limit: intParam(u, 'limit') }) });
    }

    if (b === 'packages' && c) {
      if (!isPackageHash(c)) throw new OpsError('BAD_REQUEST', 'package id must be a sha256 hex digest');
      const dir = jobs.packagePath(c);
      if (method === 'GET' || method === 'HEAD') {
        return existsSync(dir) ? send(res, 200, { exists: true }) : send(res, 404, { exists: false });
      }
      if (method === 'PUT') {
        const body = await readBody(req, maxPackageBytes);
        if (!existsSync(dir)) {
          try {
            unpackArchive(body, c, dir, maxPackageBytes * 4);
          } catch (err) {
            if (err instanceof PackageTooLargeError) throw new OpsError('PACKAGE_TOO_LARGE', err.message);
            throw new OpsError('BAD_REQUEST', `bad package: ${(err as Error).message}`);
          }
        }
        // Kept as uploaded for nodes that run the job's actors and fetch it from the head.
        keepArchive(dir, body);
        return send(res, 200, { uri: `pkg://${c}` });
      }
    }

    if (b === 'jobs') {
      if (!c) {
        if (method === 'GET') {
          const list = store.listJobs({ limit: intParam(u, 'limit') });
          const progress = store.progress(list.map((j) => j.jobId), runningIds(list));
          return send(res, 200, { jobs: list.map((j) => ({ ...j, progress: progress.get(j.jobId) })) });
        }
        if (method === 'POST') {
          const body = await readJson(req);
          const job = jobs.submit(body as unknown as JobSubmitRequest);
          return send(res, 200, { jobId: job.jobId, job });
        }
      } else {
        const jobId = c;
        if (!d) {
          if (method === 'GET') {
            const job = jobs.get(jobId);
            const progress = store.progress([jobId], runningIds([job])).get(jobId);
            return send(res, 200, { ...job, progress, report: store.report(jobId) });
          }
          if (method === 'DELETE') {
            jobs.delete(jobId);
            return send(res, 200, { deleted: true });
          }
        }
        if (d === 'stop' && method === 'POST') {
          const before = jobs.get(jobId);
          const wait = u.searchParams.get('wait') !== '0';
          const done = jobs.stop(jobId);
          const job = wait ? await done : jobs.get(jobId);
          return send(res, 200, { stopped: !terminalJobStatuses.has(before.status), job });
        }
        if (d === 'logs' && method === 'GET' && parts.length === 4) {
          const job = jobs.get(jobId);
          const { data, nextOffset, size } = readLogRange(job.logPath, intParam(u, 'offset') ?? 0);
          return send(res, 200, { logs: data.toString('utf8'), nextOffset, size, status: job.status });
        }
        if (d === 'metrics') {
          if (method === 'POST') {
            jobs.get(jobId);
            const body = await readJson(req);
            const rows = body.rows;
            if (!Array.isArray(rows)) throw new OpsError('BAD_REQUEST', 'rows must be an array of {step, values}');
            const clean = rows.map((r: unknown) => {
              const row = r as { step?: unknown; values?: unknown; time?: unknown };
              if (typeof row.step !== 'number' || !Number.isInteger(row.step) || typeof row.values !== 'object' || row.values === null) {
                throw new OpsError('BAD_REQUEST', 'each row needs an integer step and an object of numeric values');
              }
              return { step: row.step, values: row.values as Record<string, number>, time: typeof row.time === 'number' ? row.time : Date.now() };
            });
            store.addMetrics(jobId, clean);
            ctx.metricsChanged(jobId);
            return send(res, 200, { stored: clean.length });
          }
          if (method === 'GET') {
            jobs.get(jobId);
            const full = store.metricsTable(jobId, intParam(u, 'sinceStep'));
            const maxPoints = intParam(u, 'maxPoints');
            const table = maxPoints === undefined ? full : OpsStore.downsample(full, maxPoints);
            if (u.searchParams.get('format') === 'csv') {
              return send(res, 200, toCsv(table.columns, table.rows), { 'content-type': 'text/csv; charset=utf-8' });
            }
            return send(res, 200, table);
          }
        }
        if (d === 'report') {
          jobs.get(jobId);
          if (method === 'POST') {
            const body = await readJson(req);
            if (body.totalSteps !== undefined && (typeof body.totalSteps !== 'number' || !(body.totalSteps >= 0))) {
              throw new OpsError('BAD_REQUEST', 'totalSteps must be a non-negative number');
            }
            if (body.config !== undefined && !Array.isArray(body.config)) throw new OpsError('BAD_REQUEST', 'config must be an array of rows');
            const report = store.mergeReport(jobId, body);
            ctx.metricsChanged(jobId);
            return send(res, 200, report);
          }
          if (method === 'GET') return send(res, 200, store.report(jobId));
        }
        if (d === 'samples') {
          jobs.get(jobId);
          if (method === 'POST') {
            const body = await readJson(req, sampleLimits.maxPerStep * sampleLimits.maxSampleBytes);
            const { step, samples } = body;
            if (typeof step !== 'number' || !Number.isInteger(step) || !Array.isArray(samples)) {
              throw new OpsError('BAD_REQUEST', 'samples need {step: integer, samples: [objects]}');
            }
            if (!samples.every((x: unknown) => typeof x === 'object' && x !== null && !Array.isArray(x))) {
              throw new OpsError('BAD_REQUEST', 'each sample must be a JSON object');
            }
            try {
              store.addSamples(jobId, step, samples as JobSample[]);
            } catch (err) {
              if (err instanceof RangeError) throw new OpsError('BAD_REQUEST', err.message);
              throw err;
            }
            ctx.metricsChanged(jobId);
            return send(res, 200, { stored: samples.length });
          }
          if (method === 'GET') return send(res, 200, samplesPage(jobId, u));
        }
        if (d === 'actors' && method === 'GET') {
          jobs.get(jobId);
          return send(res, 200, queryActors(cluster.actors(), { ...actorQuery(u), jobId }));
        }
      }
    }

    if (b === 'actors') {
      if (!c && method === 'GET') return send(res, 200, queryActors(cluster.actors(), actorQuery(u)));
      if (c) {
        const actor = cluster.actors().find((x) => x.actorId === c);
        if (!actor) throw new OpsError('UNKNOWN_ACTOR', `no actor with id ${c}`);
        if (!d && method === 'GET') return send(res, 200, actor);
        if (d === 'kill' && method === 'POST') {
          const body = await readJson(req);
          await cluster.killActor(c, { noRestart: body.noRestart !== false });
          return send(res, 200, { killed: true });
        }
        if (d === 'restart' && method === 'POST') {
          if (!cluster.restartActor) throw new OpsError('UNSUPPORTED', 'this head cannot restart actors');
          await cluster.restartActor(c);
          return send(res, 200, { restarting: true });
        }
        if (d === 'logs' && method === 'GET') {
          const files = store.findLogFiles({ actorId: c });
          const live = actor.state === 'DEAD' ? undefined : actor.incarnation;
          const page = readActorLogs(files, u.searchParams.get('cursor') ?? undefined, { liveIncarnation: live });
          return send(res, 200, { ...page, state: actor.state });
        }
      }
    }
    send(res, 404, { error: 'NOT_FOUND', message: `no route ${method} ${u.pathname}` });
  };

  /**
   * `?step=N` (default: the latest step, unless `key` is given), `key` (one prompt over time),
   * `minReward`, `maxReward`, `limit`.
   */
  const samplesPage = (jobId: string, u: URL) => {
    const steps = store.sampleSteps(jobId);
    const key = u.searchParams.get('key') ?? undefined;
    const asked = intParam(u, 'step');
    const step = asked ?? (key === undefined ? steps.at(-1) : undefined);
    const samples = steps.length === 0 ? [] : store.samples(jobId, {
      ...(step !== undefined ? { step } : {}),
      ...(key !== undefined ? { key } : {}),
      minReward: intParam(u, 'minReward'),
      maxReward: intParam(u, 'maxReward'),
      limit: intParam(u, 'limit'),
    });
    return { steps, step: step ?? null, samples };
  };

  const runningIds = (list: readonly JobInfo[]) => new Set(list.filter((j) => j.status === 'RUNNING').map((j) => j.jobId));

  const actorQuery = (u: URL): ActorQuery => {
    const sort = u.searchParams.get('sort') ?? undefined;
    if (sort !== undefined && !(actorSortKeys as readonly string[]).includes(sort)) {
      throw new OpsError('BAD_REQUEST', `sort must be one of ${actorSortKeys.join(', ')}`);
    }
    return {
      offset: intParam(u, 'offset'),
      limit: intParam(u, 'limit'),
      sort: sort as ActorQuery['sort'],
      order: u.searchParams.get('order') === 'asc' ? 'asc' : 'desc',
      state: (u.searchParams.get('state') || undefined) as ActorState | undefined,
      jobId: u.searchParams.get('jobId') || undefined,
      className: u.searchParams.get('className') || undefined,
      nodeId: u.searchParams.get('nodeId') || undefined,
      q: u.searchParams.get('q') || undefined,
    };
  };

  const clusterStatus = () => {
    const nodes = cluster.nodes();
    const actors = cluster.actors();
    const total: Record<string, number> = {};
    const used: Record<string, number> = {};
    for (const n of nodes.filter((x) => x.state === 'ALIVE')) {
      for (const [k, v] of Object.entries(n.resourcesTotal)) {
        total[k] = (total[k] ?? 0) + v;
        used[k] = (used[k] ?? 0) + v - (n.resourcesAvailable[k] ?? v);
      }
    }
    const actorsByState: Record<string, number> = {};
    for (const x of actors) actorsByState[x.state] = (actorsByState[x.state] ?? 0) + 1;
    const jobsByStatus: Record<string, number> = {};
    for (const j of store.listJobs()) jobsByStatus[j.status] = (jobsByStatus[j.status] ?? 0) + 1;
    return { headAddress: ctx.headAddress ?? null, dashboardUrl: ctx.url(), nodes, resources: { total, used }, actorsByState, jobsByStatus };
  };
  return route;
}
