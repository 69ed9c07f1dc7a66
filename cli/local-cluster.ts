/**
 * Starts a head on this machine: the runtime head (when built into this install), its local node
 * agent, and the operations layer (jobs, HTTP API, dashboard). Used by the background daemon that
 * `rtjob start --head` launches, and in-process by `rtjob submit` when no cluster runs.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { ClusterView } from '../runtime/head/http/cluster-view.ts';
import { type Ops, startOps } from '../runtime/head/http/ops.ts';

/** Options of {@link startLocalCluster}. */
export interface LocalClusterOptions {
  sessionDir: string;
  /** Token to use; by default the session's saved token, else a new one. */
  token?: string;
  /** @default '127.0.0.1' */
  host?: string;
  /** Runtime WebSocket port. @default 6380 */
  port?: number;
  /** @default 8265 */
  dashboardPort?: number;
  numCpus?: number;
  numGpus?: number;
  resources?: Record<string, number>;
  stopGraceMs?: number;
  warn?: (msg: string) => void;
}

/** A running local head. */
export interface LocalCluster {
  address: string;
  dashboardUrl: string;
  token: string;
  sessionDir: string;
  ops: Ops;
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

/** Starts head + node agent + operations. */
export async function startLocalCluster(opts: LocalClusterOptions): Promise<LocalCluster> {
  const token = sessionToken(opts.sessionDir, opts.token);
  const host = opts.host ?? '127.0.0.1';
  // The runtime head and its node agent, in this process; their state lives in the session dir.
  const { startLocalCluster: startRuntime } = await import('../runtime/local-cluster.ts');
  const { headClusterView } = await import('../runtime/head/http/head-view.ts');
  const runtime = await startRuntime({
    token,
    sessionDir: opts.sessionDir,
    head: { host, port: opts.port ?? 6380, sessionDir: opts.sessionDir },
    node: {
      ...(opts.numCpus !== undefined ? { numCpus: opts.numCpus } : {}),
      ...(opts.numGpus !== undefined ? { numGpus: opts.numGpus } : {}),
      ...(opts.resources ? { resources: opts.resources } : {}),
    } as never,
  });
  const cluster: ClusterView = headClusterView(runtime.head);
  const headAddress = runtime.address;
  let ops: Ops;
  try {
    ops = await startOps({
      sessionDir: opts.sessionDir,
      token,
      host,
      dashboardPort: opts.dashboardPort ?? 8265,
      cluster,
      db: runtime.head.store.db,
      headAddress,
      stopGraceMs: opts.stopGraceMs,
      warn: opts.warn,
    });
  } catch (err) {
    await runtime.close();
    throw err;
  }
  return {
    address: headAddress,
    dashboardUrl: ops.http.url,
    token,
    sessionDir: opts.sessionDir,
    ops,
    close: async (o = {}) => {
      await ops.close(o);
      await runtime.close();
    },
  };
}
