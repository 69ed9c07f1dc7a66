/**
 * A finished session, served read-only: the jobs, metrics, samples, logs, nodes and actors that a
 * head left in `<session>/head.sqlite` and `<session>/logs/`, through the same REST API and
 * dashboard as a live head, with every write refused (`READ_ONLY`). `rtjob dashboard` and the
 * CLI's `list`, `logs`, `metrics` and `samples` use it when no cluster is running.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

import { OpsError } from '../jobs/errors.ts';
import { historyStore } from '../jobs/history-store.ts';
import { OpsStore } from '../jobs/ops-store.ts';
import { HeadStore } from '../../runtime/head/store.ts';
import type { ClusterView, NodeView } from './cluster-view.ts';
import { actorView } from './head-view.ts';
import { type HttpServer, startHttpServer } from './server.ts';

/** Options of {@link serveSession}. */
export interface SessionServerOptions {
  sessionDir: string;
  /** @default '127.0.0.1' */
  host?: string;
  /** 0 picks a free port. @default 0 */
  port?: number;
  /** @default a new random token */
  token?: string;
  /** Serve the dashboard's files. @default true */
  dashboard?: boolean;
  /**
   * Older sessions read with it as one run history (`history-store.ts`): their jobs are listed,
   * inspectable and comparable beside `sessionDir`'s. @default []
   */
  olderSessionDirs?: readonly string[];
}

/** A running read-only server of a session. */
export interface SessionServer {
  url: string;
  token: string;
  sessionDir: string;
  http: HttpServer;
  close(): Promise<void>;
}

/** Whether `dir` holds a head's state. */
export function isSessionDir(dir: string): boolean {
  return existsSync(join(dir, 'head.sqlite'));
}

/**
 * The session dirs under `home` (`session/`, the default of `rtjob start --head`, and `runs/*`,
 * the private clusters of `rtjob submit`), most recently written first.
 */
export function listSessions(home: string): string[] {
  const dirs = [join(home, 'session')];
  const runs = join(home, 'runs');
  if (existsSync(runs)) for (const d of readdirSync(runs)) dirs.push(join(runs, d));
  const written = (dir: string) =>
    Math.max(
      ...['head.sqlite', 'head.sqlite-wal'].map((f) =>
        existsSync(join(dir, f)) ? statSync(join(dir, f)).mtimeMs : 0,
      ),
    );
  return dirs
    .filter(isSessionDir)
    .map((dir) => ({ dir, t: written(dir) }))
    .sort((a, b) => b.t - a.t)
    .map((x) => x.dir);
}

const refuse = async (): Promise<never> => {
  throw new OpsError('READ_ONLY', 'this is a finished session, served read-only');
};

/** Serves `sessionDir` read-only; resolves once it listens. */
export async function serveSession(opts: SessionServerOptions): Promise<SessionServer> {
  if (!isSessionDir(opts.sessionDir)) {
    throw new OpsError('BAD_REQUEST', `${opts.sessionDir} is not a session dir (no head.sqlite)`);
  }
  const head = new HeadStore({ sessionDir: opts.sessionDir });
  const older = (opts.olderSessionDirs ?? [])
    .filter((d) => d !== opts.sessionDir && isSessionDir(d))
    .map((sessionDir) => new HeadStore({ sessionDir }));
  const heads = [head, ...older];
  const store = historyStore(heads.map((h) => new OpsStore(h.db)));
  const closeAll = () => {
    for (const h of heads) h.close();
  };
  const cluster: ClusterView = {
    // Nothing runs any more: every node is shown as it was, but DEAD.
    nodes: () =>
      head.listNodes().map(
        (n, i): NodeView => ({
          nodeId: n.nodeId,
          hostname: n.hostname,
          address: n.host,
          state: 'DEAD',
          isHead: i === 0,
          resourcesTotal: { ...n.total } as Record<string, number>,
          resourcesAvailable: { ...n.total } as Record<string, number>,
          memoryTotalBytes: 0,
          memoryUsedBytes: 0,
          cpuPercent: null,
          cpuCount: null,
          usageSampledAt: null,
          workers: 0,
          processes: [],
          startedAt: n.startedAtMs,
        }),
      ),
    actors: () => heads.flatMap((h) => h.listActors().map((a) => actorView(a))),
    killActor: refuse,
    killJobActors: refuse,
    placementGroups: () => head.listPlacementGroups(),
  };
  const jobs = readOnlyJobs(store);
  let dashboardDir: string | undefined;
  if (opts.dashboard !== false) {
    const { buildDashboard } = await import('../dashboard/build.ts');
    dashboardDir = await buildDashboard();
  }
  const token = opts.token ?? randomBytes(24).toString('base64url');
  let http: HttpServer;
  try {
    http = await startHttpServer({
      token,
      host: opts.host,
      port: opts.port ?? 0,
      store,
      jobs,
      cluster,
      dashboardDir,
      readOnly: { sessionDir: opts.sessionDir, sessions: heads.length },
    });
  } catch (err) {
    closeAll();
    throw err;
  }
  return {
    url: http.url,
    token,
    sessionDir: opts.sessionDir,
    http,
    close: async () => {
      await http.close();
      closeAll();
    },
  };
}

/** The job API of a session nobody runs: reads from the store, refuses everything else. */
function readOnlyJobs(store: OpsStore): Parameters<typeof startHttpServer>[0]['jobs'] {
  const fail = (): never => {
    throw new OpsError('READ_ONLY', 'this is a finished session, served read-only');
  };
  return {
    get: (jobId) => {
      const job = store.getJob(jobId);
      if (!job) throw new OpsError('UNKNOWN_JOB', `no job with id ${jobId}`);
      return job;
    },
    submit: fail,
    stop: fail,
    delete: fail,
    packagePath: fail,
    on: () => undefined,
    off: () => undefined,
  };
}
