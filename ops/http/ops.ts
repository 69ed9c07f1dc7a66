/**
 * Attaches cluster operations to a head: the operations tables, the job supervisor, and the HTTP
 * server (REST API, live updates, `/metrics`, dashboard). One call, one `close()`.
 *
 * @example
 * const ops = await startOps({ sessionDir, token, cluster: headView, headAddress: head.address });
 * console.log(ops.http.url);
 * await ops.close({ stopJobs: true });
 *
 * @module
 */
import type Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

import { OpsStore } from '../jobs/ops-store.ts';
import { JobSupervisor } from '../jobs/supervisor.ts';
import { type ClusterView, localClusterView } from './cluster-view.ts';
import { withHeadProcesses } from './head-processes.ts';
import { type HttpServer, startHttpServer } from './server.ts';

/** Options of {@link startOps}. */
export interface OpsOptions {
  sessionDir: string;
  token: string;
  /** @default '127.0.0.1' */
  host?: string;
  /** 0 picks a free port. @default 8265 */
  dashboardPort?: number;
  /** The runtime head's view; without one the cluster is this machine with no actors. */
  cluster?: ClusterView;
  /** The runtime store's database, to keep every table in one file. @default `<sessionDir>/ops.db` */
  db?: Database.Database;
  /** The runtime's WebSocket address, given to drivers as RTJOB_ADDRESS. */
  headAddress?: string;
  /** More env every driver gets (e.g. `RTJOB_HEAD_RECONNECT_MS` for a head that can restart). */
  driverEnv?: Record<string, string>;
  /** Serve the dashboard (built on first use). @default true */
  dashboard?: boolean;
  /** SIGTERM→SIGKILL grace when stopping a driver. @default 3000 */
  stopGraceMs?: number;
  maxPackageBytes?: number;
  /** Entrypoint names that run a script, for the job supervisor. @default none */
  builtins?: Readonly<Record<string, string>>;
  warn?: (msg: string) => void;
}

/** The running operations layer. */
export interface Ops {
  store: OpsStore;
  jobs: JobSupervisor;
  http: HttpServer;
  /** The cluster as the API shows it: the head's node lists the head and job drivers too. */
  cluster: ClusterView;
  /** `stopJobs`: stop every driver (a clean cluster stop) rather than leave them to a new head. */
  close(opts?: { stopJobs?: boolean }): Promise<void>;
}

/** Starts the operations layer for a head. */
export async function startOps(opts: OpsOptions): Promise<Ops> {
  mkdirSync(opts.sessionDir, { recursive: true });
  const cluster = opts.cluster ?? localClusterView();
  const store = new OpsStore(opts.db ?? join(opts.sessionDir, 'ops.db'));
  let httpUrl = '';
  const jobs = new JobSupervisor({
    store,
    sessionDir: opts.sessionDir,
    stopGraceMs: opts.stopGraceMs,
    builtins: opts.builtins,
    clusterEnv: () => ({
      ...opts.driverEnv,
      ...(opts.headAddress ? { RTJOB_ADDRESS: opts.headAddress } : {}),
      RTJOB_TOKEN: opts.token,
      RTJOB_HTTP_ADDRESS: httpUrl,
    }),
    capacity: () => {
      // Entrypoints run on the head's machine, so only the head node's resources count.
      const head = cluster.nodes().find((n) => n.isHead && n.state === 'ALIVE');
      return { cpus: head?.resourcesTotal.CPU ?? 0, gpus: head?.resourcesTotal.GPU ?? 0 };
    },
    killJobActors: (jobId) => cluster.killJobActors(jobId),
  });
  let dashboardDir: string | undefined;
  if (opts.dashboard !== false) {
    const { buildDashboard } = await import('../dashboard/build.ts');
    dashboardDir = await buildDashboard();
  }
  const sampled = withHeadProcesses(cluster, () => jobs.drivers());
  let http: HttpServer;
  try {
    http = await startHttpServer({
      token: opts.token,
      host: opts.host,
      port: opts.dashboardPort,
      store,
      jobs,
      cluster: sampled.cluster,
      dashboardDir,
      maxPackageBytes: opts.maxPackageBytes,
      headAddress: opts.headAddress,
      warn: opts.warn,
    });
  } catch (err) {
    sampled.close();
    await jobs.close();
    store.close();
    throw err;
  }
  httpUrl = http.url;
  store.addEvent('head', 'head', `operations started; dashboard at ${http.url}`);
  return {
    store,
    jobs,
    http,
    cluster: sampled.cluster,
    close: async (o = {}) => {
      sampled.close();
      await jobs.close(o);
      await http.close();
      store.close();
    },
  };
}
