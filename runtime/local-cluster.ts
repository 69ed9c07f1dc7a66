/**
 * A cluster on this machine, in this process: a head and (usually) one node agent. `init()`
 * starts one when no cluster is configured and tests start them directly (`startLocalCluster`);
 * `rtjob start --head` and `rtjob submit` with no cluster add the operations layer on top — jobs,
 * the HTTP API and the dashboard — on the session's token and ports (`startClusterHead`).
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Head, type HeadOptions, startHead } from './head/head.ts';
import type { Ops } from '../ops/http/ops.ts';
import { type NodeAgent, type NodeAgentOptions, startNodeAgent } from './node/agent.ts';

/** Options for `startLocalCluster`. */
export interface LocalClusterOptions {
  head?: Omit<HeadOptions, 'token'>;
  /** The in-process node agent's options; `false` starts none (the head alone). */
  node?: Omit<NodeAgentOptions, 'headAddress' | 'token' | 'sessionDir'> | false;
  token?: string;
  /** Session dir; a temp dir (removed at `close`) when omitted. */
  sessionDir?: string;
}

type NodeOptions = Omit<NodeAgentOptions, 'headAddress' | 'token' | 'sessionDir'>;

/** A head plus one node agent in this process. */
export interface LocalCluster {
  readonly head: Head;
  /** The in-process node agent (absent with `node: false`). */
  readonly node: NodeAgent;
  readonly address: string;
  readonly token: string;
  readonly sessionDir: string;
  /** Adds another node agent (in this process) with its own resources. */
  addNode(opts?: NodeOptions): Promise<NodeAgent>;
  close(): Promise<void>;
}

/** Starts a head on a free port and a node agent. */
export async function startLocalCluster(opts: LocalClusterOptions = {}): Promise<LocalCluster> {
  const ownDir = opts.sessionDir === undefined;
  const sessionDir = opts.sessionDir ?? mkdtempSync(join(tmpdir(), 'rtjob-session-'));
  const token = opts.token ?? randomBytes(24).toString('base64url');
  const head = await startHead({ port: 0, ...opts.head, token, sessionDir: opts.head?.sessionDir });
  const nodes: NodeAgent[] = [];
  const addNode = async (n: NodeOptions = {}) => {
    const agent = await startNodeAgent({ ...n, headAddress: head.address, token, sessionDir });
    nodes.push(agent);
    return agent;
  };
  let node: NodeAgent | undefined;
  try {
    if (opts.node !== false) node = await addNode(opts.node);
  } catch (e) {
    await head.close();
    throw e;
  }
  return {
    head,
    node: node as NodeAgent,
    address: head.address,
    token,
    sessionDir,
    addNode,
    async close() {
      await Promise.all(nodes.map((n) => n.close()));
      await head.close();
      if (ownDir) rmSync(sessionDir, { recursive: true, force: true });
    },
  };
}

// ---- the head of a long-lived cluster: runtime head + operations (+ node agent) ---------------

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
 * The operations modules load only here, so `init()`'s local cluster stays light.
 */
export async function startClusterHead(opts: ClusterHeadOptions): Promise<ClusterHead> {
  const token = sessionToken(opts.sessionDir, opts.token);
  const host = opts.host ?? '127.0.0.1';
  const port = opts.port ?? 6380;
  const { startOps } = await import('../ops/http/ops.ts');
  const { headClusterView, indexHeadWorkerLogs } = await import('../ops/http/head-view.ts');
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
