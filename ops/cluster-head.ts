/**
 * The head of a long-lived cluster: the runtime's head and node agent (`startLocalCluster`) under
 * the operator plane — jobs, the HTTP API and the dashboard — on the session's token and ports.
 * `rtjob start --head` (the head daemon) and `rtjob submit` with no cluster start it.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Head } from '../runtime/head/head.ts';
import { startLocalCluster } from '../runtime/local-cluster.ts';
import type { NodeAgent } from '../runtime/node/agent.ts';
import type { Ops } from './http/ops.ts';

/** Options of {@link startClusterHead}. */
export interface ClusterHeadOptions {
  sessionDir: string;
  /** Token to use; by default the session's saved token, else a new one. */
  token?: string;
  /** @default '127.0.0.1' */
  host?: string;
  /** Runtime WebSocket port; 0 picks a free one. @default 6380 */
  port?: number;
  /** @default 8265 */
  dashboardPort?: number;
  /** Ports a previous head of this session used; tried first when `port`/`dashboardPort` is 0. */
  previousPorts?: { port?: number; dashboardPort?: number };
  /** Run a node agent in this process. @default true */
  inProcessNode?: boolean;
  /** How long drivers keep reconnecting to a head that went away (a restart). @default 0 */
  driverReconnectMs?: number;
  numCpus?: number;
  numGpus?: number;
  resources?: Record<string, number>;
  stopGraceMs?: number;
  /** A node silent this long is dead; also the head-restart recovery window. @default 10000 */
  nodeHeartbeatTimeoutMs?: number;
  /** Entrypoint names that run a script (`train_ppo` → its driver); the CLI passes them. */
  builtins?: Readonly<Record<string, string>>;
  warn?: (msg: string) => void;
}

/** A running cluster head with its operations layer. */
export interface ClusterHead {
  address: string;
  dashboardUrl: string;
  token: string;
  sessionDir: string;
  head: Head;
  ops: Ops;
  node?: NodeAgent;
  close(opts?: { stopJobs?: boolean }): Promise<void>;
}

/**
 * The session's token: kept in `<sessionDir>/token` (0600) so a head restarted on the same
 * session accepts the node agents and drivers that were connected to the old one.
 */
export function sessionToken(sessionDir: string, given?: string): string {
  const file = join(sessionDir, 'token');
  mkdirSync(sessionDir, { recursive: true, mode: 0o700 });
  if (given) {
    writeFileSync(file, given, { mode: 0o600 });
    return given;
  }
  if (existsSync(file)) return readFileSync(file, 'utf8').trim();
  const token = randomBytes(24).toString('base64url');
  writeFileSync(file, token, { mode: 0o600 });
  return token;
}

/** Tries `preferred` first (a restarted head keeps its address), then `fallback`. */
async function onPort<T>(
  preferred: number | undefined,
  fallback: number,
  start: (port: number) => Promise<T>,
): Promise<T> {
  if (preferred !== undefined && preferred !== fallback) {
    try {
      return await start(preferred);
    } catch {
      // taken meanwhile: clients of the old head will not find this one by address
    }
  }
  return start(fallback);
}

/**
 * Starts a cluster's head on a session dir: the runtime head (recovering the session's state),
 * the operations layer (jobs, HTTP API, dashboard) and, unless told otherwise, a node agent in
 * this process. The background head daemon runs its node agent as a process of its own so that
 * workers keep running through a head restart; `rtjob submit` with no cluster runs it all here.
 */
export async function startClusterHead(opts: ClusterHeadOptions): Promise<ClusterHead> {
  const token = sessionToken(opts.sessionDir, opts.token);
  const host = opts.host ?? '127.0.0.1';
  const port = opts.port ?? 6380;
  // Loaded here, not at import: the CLI imports this module for every command.
  const { startOps } = await import('./http/ops.ts');
  const { headClusterView, indexHeadWorkerLogs } = await import('./http/head-view.ts');
  const core = await onPort(port === 0 ? opts.previousPorts?.port : undefined, port, (p) =>
    startLocalCluster({
      sessionDir: opts.sessionDir,
      token,
      head: {
        host,
        port: p,
        sessionDir: opts.sessionDir,
        nodeHeartbeatTimeoutMs: opts.nodeHeartbeatTimeoutMs,
      },
      node:
        opts.inProcessNode === false
          ? false
          : { numCpus: opts.numCpus, numGpus: opts.numGpus, resources: opts.resources },
    }),
  );
  const { head } = core;
  const node = opts.inProcessNode === false ? undefined : core.node;
  let ops: Ops;
  try {
    const dashboardPort = opts.dashboardPort ?? 8265;
    ops = await onPort(
      dashboardPort === 0 ? opts.previousPorts?.dashboardPort : undefined,
      dashboardPort,
      (p) =>
        startOps({
          sessionDir: opts.sessionDir,
          token,
          host,
          dashboardPort: p,
          cluster: headClusterView(head),
          db: head.store.db,
          headAddress: head.address,
          driverEnv: opts.driverReconnectMs
            ? { RTJOB_HEAD_RECONNECT_MS: String(opts.driverReconnectMs) }
            : {},
          stopGraceMs: opts.stopGraceMs,
          builtins: opts.builtins,
          warn: opts.warn,
        }),
    );
  } catch (err) {
    await core.close();
    throw err;
  }
  const stopIndex = indexHeadWorkerLogs(head, ops.store);
  return {
    address: head.address,
    dashboardUrl: ops.http.url,
    token,
    sessionDir: opts.sessionDir,
    head,
    ops,
    node,
    close: async (o = {}) => {
      stopIndex();
      await ops.close(o);
      await core.close();
    },
  };
}
