/**
 * The head's HTTP server: the REST API under `/api/`, live updates (server-sent events at
 * `/api/events`, WebSocket log tails at `/api/jobs/:id/logs/tail`), Prometheus text at
 * `/metrics`, and the dashboard's static files. Every request but `/login` needs the token.
 *
 * @module
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, normalize, sep } from 'node:path';
import { WebSocketServer, type WebSocket } from 'ws';

import { OpsError } from '../jobs/errors.ts';
import { type OpsStore, terminalJobStatuses } from '../jobs/ops-store.ts';
import { defaultMaxPackageBytes } from '../../runtime/packages/working-dir.ts';
import { followLog } from '../logs/log-file.ts';
import { authenticate, isLoopback, loginCookie, sameOrigin } from './auth.ts';
import type { ClusterView } from './cluster-view.ts';
import type { MetricsEvent } from './contract.ts';
import { bodyUnread, send, sendAndDropBody } from './respond.ts';
import { apiRoutes, type JobsApi, type ReadOnlySession } from './routes.ts';

/** Options of {@link startHttpServer}. */
export interface HttpServerOptions {
  token: string;
  /** @default '127.0.0.1' */
  host?: string;
  /** 0 picks a free port. @default 8265 */
  port?: number;
  store: OpsStore;
  jobs: JobsApi;
  cluster: ClusterView;
  /** Serve a finished session: reads only. */
  readOnly?: ReadOnlySession;
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

const mime: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.map': 'application/json',
};

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

  const route = apiRoutes({
    store,
    jobs,
    cluster,
    maxPackageBytes,
    headAddress: opts.headAddress,
    readOnly: opts.readOnly,
    url: () => url,
    subscribe: (req, res) => {
      res.writeHead(200, {
        'content-type': 'text/event-stream',
        'cache-control': 'no-store',
        connection: 'keep-alive',
      });
      res.write('retry: 2000\n\n');
      sse.add(res);
      req.on('close', () => sse.delete(res));
    },
    metricsChanged: (jobId, fromStep) => metricsChanged(jobId, fromStep),
    serveStatic: (req, res, pathname) => serveStatic(req, res, pathname),
  });

  // Metric rows can arrive every few ms; subscribers hear about each job at most 4 times a second,
  // with the smallest step stored since the previous event.
  const pendingMetrics = new Map<string, { timer: NodeJS.Timeout; fromStep?: number }>();
  const metricsChanged = (jobId: string, fromStep?: number) => {
    const pending = pendingMetrics.get(jobId);
    if (pending) {
      if (fromStep !== undefined)
        pending.fromStep = Math.min(pending.fromStep ?? Infinity, fromStep);
      return;
    }
    const timer = setTimeout(() => {
      const from = pendingMetrics.get(jobId)?.fromStep;
      pendingMetrics.delete(jobId);
      const event: MetricsEvent = { jobId, ...(from !== undefined ? { fromStep: from } : {}) };
      broadcast('metrics', event);
    }, 250);
    pendingMetrics.set(jobId, { timer, ...(fromStep !== undefined ? { fromStep } : {}) });
  };
  let clusterTimer: NodeJS.Timeout | undefined;
  const unsubscribe = cluster.onChange?.(() => {
    clusterTimer ??= setTimeout(() => {
      clusterTimer = undefined;
      broadcast('cluster', {});
    }, 500);
  });

  // Text files gzipped once per build (app.js is ~5× smaller), keyed by path and mtime.
  const gzipped = new Map<string, { mtimeMs: number; body: Buffer }>();
  const gzipOf = (file: string, mtimeMs: number): Buffer => {
    const hit = gzipped.get(file);
    if (hit?.mtimeMs === mtimeMs) return hit.body;
    const body = gzipSync(readFileSync(file));
    gzipped.set(file, { mtimeMs, body });
    return body;
  };
  const serveStatic = (req: IncomingMessage, res: ServerResponse, pathname: string) => {
    const dir = opts.dashboardDir;
    if (!dir) return send(res, 404, { error: 'NOT_FOUND', message: 'no dashboard in this build' });
    // Client-side routes (#/jobs/x) all load index.html; only real files have an extension.
    const rel = extname(pathname) ? normalize(pathname).replace(/^([/\\])+/, '') : 'index.html';
    const file = join(dir, rel);
    if (!file.startsWith(dir + sep) || !existsSync(file) || !statSync(file).isFile()) {
      return send(res, 404, { error: 'NOT_FOUND', message: `no file ${pathname}` });
    }
    const type = mime[extname(file)] ?? 'application/octet-stream';
    const gzip =
      /^text\/|^application\/json|^image\/svg/.test(type) &&
      /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
    res.writeHead(200, {
      'content-type': type,
      'cache-control': 'no-cache',
      vary: 'accept-encoding',
      ...(gzip ? { 'content-encoding': 'gzip' } : {}),
      'x-content-type-options': 'nosniff',
      'content-security-policy':
        "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
    });
    res.end(gzip ? gzipOf(file, statSync(file).mtimeMs) : readFileSync(file));
  };

  const server = createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://localhost');
    if (u.pathname === '/login') {
      const t = u.searchParams.get('token') ?? '';
      const ok =
        t.length > 0 &&
        authenticate({ headers: { authorization: `Bearer ${t}` } } as IncomingMessage, token);
      if (!ok) return send(res, 401, 'invalid token\n');
      res.writeHead(302, {
        'set-cookie': loginCookie(token),
        location: '/',
        'cache-control': 'no-store',
      });
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
      const [status, body] =
        err instanceof OpsError
          ? [err.status, { error: err.code, message: err.message }]
          : [500, { error: 'INTERNAL', message: (err as Error).message ?? String(err) }];
      // A body refused part way: the answer closes the connection, and the rest is dropped.
      if (bodyUnread(req)) sendAndDropBody(req, res, status, body);
      else send(res, status, body);
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
  const shownHost =
    host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
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
      for (const p of pendingMetrics.values()) clearTimeout(p.timer);
      for (const res of sse) res.end();
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
