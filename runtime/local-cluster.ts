/**
 * A cluster on this machine, in this process: a head and (usually) one node agent. `init()`
 * starts one when no cluster is configured and tests start them directly (`startLocalCluster`);
 * the operator plane's `ops/cluster-head.ts` starts one under its jobs, HTTP API and dashboard.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Head, type HeadOptions, startHead } from './head/head.ts';
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
