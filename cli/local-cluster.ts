/**
 * Starts a head on this machine: the runtime head, the operations layer (jobs, HTTP API,
 * dashboard) and, unless told otherwise, a node agent in the same process. The background head
 * daemon (`rtjob start --head`) runs its node agent as a process of its own so that workers keep
 * running through a head restart; `rtjob submit` with no cluster runs everything in-process.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { type Head, startHead } from '../runtime/head/head.ts';
import { headClusterView, indexHeadWorkerLogs } from '../runtime/head/http/head-view.ts';
import { type Ops, startOps } from '../runtime/head/http/ops.ts';
import { type NodeAgent, startNodeAgent } from '../runtime/node/agent.ts';

/** Options of {@link startLocalCluster}. */
export interface LocalClusterOptions {
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
  warn?: (msg: string) => void;
}

/** A running local head. */
export interface LocalCluster {
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
async function onPort<T>(preferred: number | undefined, fallback: number, start: (port: number) => Promise<T>): Promise<T> {
  if (preferred !== undefined && preferred !== fallback) {
    try {
      return await start(preferred);
    } catch {
      // taken meanwhile: clients of the old head will not find this one by address
    }
  }
  return start(fallback);
}

/** Starts head + operations (+ an in-process node agent). */
export async function startLocalCluster(opts: LocalClusterOptions): Promise<LocalCluster> {
  const token = sessionToken(opts.sessionDir, opts.token);
  const host = opts.host ?? '127.0.0.1';
  const port = opts.port ?? 6380;
  const head = await onPort(port === 0 ? opts.previousPorts?.port : undefined, port, (p) =>
    startHead({ host, port: p, token, sessionDir: opts.sessionDir, nodeHeartbeatTimeoutMs: opts.nodeHeartbeatTimeoutMs }),
  );
  let node: NodeAgent | undefined;
  let ops: Ops | undefined;
  try {
    if (opts.inProcessNode !== false) {
      node = await startNodeAgent({
        headAddress: head.address,
        token,
        sessionDir: opts.sessionDir,
        numCpus: opts.numCpus,
        numGpus: opts.numGpus,
        resources: opts.resources,
      });
    }
    const dashboardPort = opts.dashboardPort ?? 8265;
    ops = await onPort(dashboardPort === 0 ? opts.previousPorts?.dashboardPort : undefined, dashboardPort, (p) =>
      startOps({
        sessionDir: opts.sessionDir,
        token,
        host,
        dashboardPort: p,
        cluster: headClusterView(head),
        db: head.store.db,
        headAddress: head.address,
        driverEnv: opts.driverReconnectMs ? { RTJOB_HEAD_RECONNECT_MS: String(opts.driverReconnectMs) } : {},
        stopGraceMs: opts.stopGraceMs,
        warn: opts.warn,
      }),
    );
  } catch (err) {
    await node?.close();
    await head.close();
    throw err;
  }
  const started = ops;
  const stopIndex = indexHeadWorkerLogs(head, started.store);
  return {
    address: head.address,
    dashboardUrl: started.http.url,
    token,
    sessionDir: opts.sessionDir,
    head,
    ops: started,
    node,
    close: async (o = {}) => {
      stopIndex();
      await started.close(o);
      await node?.close();
      await head.close();
    },
  };
}
