/**
 * The head's HTTP server: the REST API under `/api/`, live updates (server-sent events at
 * `/api/events`, WebSocket log tails at `/api/jobs/:id/logs/tail`), Prometheus text at
 * `/metrics`, and the dashboard's static files. Every request but `/login` needs the token.
 *
 * @module
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, normalize, sep } from 'node:path';
import { WebSocketServer, type WebSocket } from 'ws';

import { followLog, readLogRange } from '../logs/log-file.ts';
import { readActorLogs } from '../logs/worker-logs.ts';
import { OpsError } from '../jobs/errors.ts';
import { type OpsStore, terminalJobStatuses } from '../jobs/ops-store.ts';
import type { JobSubmitRequest, JobSupervisor } from '../jobs/supervisor.ts';
import {
  defaultMaxPackageBytes,
  isPackageHash,
  PackageTooLargeError,
  unpackArchive,
} from '../jobs/working-dir.ts';
import { authenticate, isLoopback, loginCookie, sameOrigin } from './auth.ts';
import {
  type ActorQuery,
  actorSortKeys,
  type ActorState,
  type ClusterView,
  queryActors,
} from './cluster-view.ts';
import { renderPrometheus } from './prometheus.ts';

/** Options of {@link startHttpServer}. */
export interface HttpServerOptions {
  token: string;
  /** @default '127.0.0.1' */
  host?: string;
  /** 0 picks a free port. @default 8265 */
  port?: number;
  store: OpsStore;
  jobs: JobSupervisor;
  cluster: ClusterView;
  /** Folder with the built dashboard (index.html, app.js, app.css). */
  dashboardDir?: string;
  /** @default 100 MiB */
  maxPackageBytes?: number;
  /** Address of the runtime's WebSocket endpoint, shown by `/api/cluster`. */
  headAddress?: string;
  /** Called with warnings (a public bind). @default console.warn */
  warn?: (msg: string) => void;
}

/** A running HTTP server. */
export interface HttpServer {
  url: string;
  port: number;
  server: Server;
  /** Pushes an event to every live-update subscriber. */
  broadcast(event: string, data: unknown): void;
  close(): Promise<void>;
}

const maxJsonBytes = 1 << 20;
const version = '0.1.0';

const mime: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.map': 'application/json',
};

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, {
    'content-type': typeof body === 'string' ? 'text/plain; charset=utf-8' : 'application/json',
    'cache-control': 'no-store',
    ...headers,
  });
  res.end(text);
}

function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > maxBytes) {
      reject(new OpsError('PACKAGE_TOO_LARGE', `request body of ${declared} bytes is over the ${maxBytes}-byte limit`));
      req.resume();
      return;
    }
    const parts: Buffer[] = [];
    let size = 0;
    req.on('data', (d: Buffer) => {
      size += d.length;
      if (size > maxBytes) {
        reject(new OpsError('PACKAGE_TOO_LARGE', `request body is over the ${maxBytes}-byte limit`));
        req.destroy();
        return;
      }
      parts.push(d);
    });
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const body = await readBody(req, maxJsonBytes);
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8') || '{}');
  } catch {
    throw new OpsError('BAD_REQUEST', 'request body is not valid JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new OpsError('BAD_REQUEST', 'request body must be a JSON object');
  return v as Record<string, unknown>;
}

function intParam(u: URL, name: string): number | undefined {
  const v = u.searchParams.get(name);
  if (v === null || v === '') return undefined;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new OpsError('BAD_REQUEST', `${name} must be a number`);
  return n;
}

function toCsv(columns: string[], rows: (number | null)[][]): string {
  const lines = [columns.join(',')];
  for (const r of rows) lines.push(r.map((v) => (v === null ? '' : String(v))).join(','));
  return lines.join('\n') + '\n';
}

/** Starts the server; resolves once it listens. */
export async function startHttpServer(opts: HttpServerOptions): Promise<HttpServer> {
  const host = opts.host ?? '127.0.0.1';
  const maxPackageBytes = opts.maxPackageBytes ?? defaultMaxPackageBytes;
  const { store, jobs, cluster, token } = opts;
  const sse = new Set<ServerResponse>();
  const wss = new WebSocketServer({ noServer: true, maxPayload: 64 * 1024 });

  const broadcast = (event: string, data: unknown) => {
    const frame = `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    for (const res of sse) res.write(frame);
  };
  const onJob = (job: unknown) => broadcast('job', job);
  jobs.on('job', onJob);
  const keepAlive = setInterval(() => {
    for (const res of sse) res.write(': keep-alive\n\n');
  }, 15000);
  keepAlive.unref();

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
    if (a !== 'api') return serveStatic(res, u.pathname);

    if (b === 'version') return send(res, 200, { version });
    if (b === 'events' && method === 'GET') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
      res.write('retry: 2000\n\n');
      sse.add(res);
      req.on('close', () => sse.delete(res));
      return;
    }
    if (b === 'cluster' && method === 'GET') return send(res, 200, clusterStatus());
    if (b === 'nodes' && method === 'GET') return send(res, 200, { nodes: cluster.nodes() });
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
        return send(res, 200, { uri: `pkg://${c}` });
      }
    }

    if (b === 'jobs') {
      if (!c) {
        if (method === 'GET') return send(res, 200, { jobs: store.listJobs({ limit: intParam(u, 'limit') }) });
        if (method === 'POST') {
          const body = await readJson(req);
          const job = jobs.submit(body as unknown as JobSubmitRequest);
          return send(res, 200, { jobId: job.jobId, job });
        }
      } else {
        const jobId = c;
        if (!d) {
          if (method === 'GET') return send(res, 200, jobs.get(jobId));
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
            metricsChanged(jobId);
            return send(res, 200, { stored: clean.length });
          }
          if (method === 'GET') {
            jobs.get(jobId);
            const table = store.metricsTable(jobId, intParam(u, 'sinceStep'));
            if (u.searchParams.get('format') === 'csv') {
              return send(res, 200, toCsv(table.columns, table.rows), { 'content-type': 'text/csv; charset=utf-8' });
            }
            return send(res, 200, table);
          }
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
    return { headAddress: opts.headAddress ?? null, dashboardUrl: url, nodes, resources: { total, used }, actorsByState, jobsByStatus };
  };

  // Metric rows can arrive every few ms; subscribers hear about each job at most 4 times a second.
  const pendingMetrics = new Map<string, NodeJS.Timeout>();
  const metricsChanged = (jobId: string) => {
    if (pendingMetrics.has(jobId)) return;
    pendingMetrics.set(
      jobId,
      setTimeout(() => {
        pendingMetrics.delete(jobId);
        broadcast('metrics', { jobId });
      }, 250),
    );
  };
  let clusterTimer: NodeJS.Timeout | undefined;
  const unsubscribe = cluster.onChange?.(() => {
    clusterTimer ??= setTimeout(() => {
      clusterTimer = undefined;
      broadcast('cluster', {});
    }, 500);
  });

  const serveStatic = (res: ServerResponse, pathname: string) => {
    const dir = opts.dashboardDir;
    if (!dir) return send(res, 404, { error: 'NOT_FOUND', message: 'no dashboard in this build' });
    // Client-side routes (#/jobs/x) all load index.html; only real files have an extension.
    const rel = extname(pathname) ? normalize(pathname).replace(/^([/\\])+/, '') : 'index.html';
    const file = join(dir, rel);
    if (!file.startsWith(dir + sep) || !existsSync(file) || !statSync(file).isFile()) {
      return send(res, 404, { error: 'NOT_FOUND', message: `no file ${pathname}` });
    }
    res.writeHead(200, {
      'content-type': mime[extname(file)] ?? 'application/octet-stream',
      'cache-control': 'no-cache',
      'x-content-type-options': 'nosniff',
      'content-security-policy': "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
    });
    res.end(readFileSync(file));
  };

  const server = createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://localhost');
    if (u.pathname === '/login') {
      const t = u.searchParams.get('token') ?? '';
      const ok = t.length > 0 && authenticate({ headers: { authorization: `Bearer ${t}` } } as IncomingMessage, token);
      if (!ok) return send(res, 401, 'invalid token\n');
      res.writeHead(302, { 'set-cookie': loginCookie(token), location: '/', 'cache-control': 'no-store' });
      res.end();
      return;
    }
    const how = authenticate(req, token);
    if (!how) {
      const wantsHtml = (req.headers.accept ?? '').includes('text/html');
      return send(
        res,
        401,
        wantsHtml
          ? 'Unauthorized. Open the login link that `rtjob start --head` printed (or run `rtjob dashboard`).\n'
          : { error: 'UNAUTHORIZED', message: 'missing or wrong cluster token' },
        { 'www-authenticate': 'Bearer realm="rtjob"' },
      );
    }
    if (how === 'cookie' && req.method !== 'GET' && req.method !== 'HEAD' && !sameOrigin(req)) {
      return send(res, 403, { error: 'FORBIDDEN', message: 'cross-origin request refused' });
    }
    route(req, res, u).catch((err: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (err instanceof OpsError) send(res, err.status, { error: err.code, message: err.message });
      else send(res, 500, { error: 'INTERNAL', message: (err as Error).message ?? String(err) });
    });
  });

  server.on('upgrade', (req, socket, head) => {
    const u = new URL(req.url ?? '/', 'http://localhost');
    const fail = (status: number, text: string) => {
      socket.end(`HTTP/1.1 ${status} ${text}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
    };
    const how = authenticate(req, token);
    if (!how) return fail(401, 'Unauthorized');
    if (how === 'cookie' && !sameOrigin(req)) return fail(403, 'Forbidden');
    const m = /^\/api\/jobs\/([^/]+)\/logs\/tail$/.exec(u.pathname);
    if (!m) return fail(404, 'Not Found');
    let job;
    try {
      job = jobs.get(decodeURIComponent(m[1]!));
    } catch {
      return fail(404, 'Not Found');
    }
    wss.handleUpgrade(req, socket, head, (ws: WebSocket) => {
      const jobId = job.jobId;
      const follower = followLog(
        job.logPath,
        (chunk) => {
          if (ws.readyState === ws.OPEN) ws.send(chunk.toString('utf8'));
        },
        {
          fromOffset: Number(u.searchParams.get('offset') ?? 0) || 0,
          isDone: () => {
            const j = store.getJob(jobId);
            return !j || terminalJobStatuses.has(j.status);
          },
        },
      );
      void follower.done.then(() => ws.close(1000, 'job finished'));
      ws.on('close', () => follower.stop());
      ws.on('error', () => follower.stop());
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 8265, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  if (!isLoopback(host)) {
    (opts.warn ?? console.warn)(
      `warning: the dashboard and job API listen on ${host}, reachable from other machines; ` +
        'anyone with the token can run code on this cluster — keep the token secret and the port firewalled',
    );
  }
  const port = (server.address() as AddressInfo).port;
  const shownHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  const url = `http://${shownHost}:${port}`;

  return {
    url,
    port,
    server,
    broadcast,
    close: async () => {
      jobs.off('job', onJob);
      unsubscribe?.();
      clearInterval(keepAlive);
      if (clusterTimer) clearTimeout(clusterTimer);
      for (const t of pendingMetrics.values()) clearTimeout(t);
      for (const res of sse) res.end();
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
