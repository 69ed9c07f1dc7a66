/**
 * An in-process cluster: a head on an ephemeral port and one node agent, both in this process.
 * `init()` starts one when no cluster is configured; tests start them directly.
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
  node?: Omit<NodeAgentOptions, 'headAddress' | 'token' | 'sessionDir'>;
  token?: string;
  /** Session dir; a temp dir (removed at `close`) when omitted. */
  sessionDir?: string;
}

/** A head plus one node agent in this process. */
export interface LocalCluster {
  readonly head: Head;
  readonly node: NodeAgent;
  readonly address: string;
  readonly token: string;
  readonly sessionDir: string;
  /** Adds another node agent (in this process) with its own resources. */
  addNode(opts?: LocalClusterOptions['node']): Promise<NodeAgent>;
  close(): Promise<void>;
}

/** Starts a head on a free port and a node agent. */
export async function startLocalCluster(opts: LocalClusterOptions = {}): Promise<LocalCluster> {
  const ownDir = opts.sessionDir === undefined;
  const sessionDir = opts.sessionDir ?? mkdtempSync(join(tmpdir(), 'rtjob-session-'));
  const token = opts.token ?? randomBytes(24).toString('base64url');
  const head = await startHead({ port: 0, ...opts.head, token, sessionDir: opts.head?.sessionDir });
  const nodes: NodeAgent[] = [];
  const addNode = async (n: LocalClusterOptions['node'] = {}) => {
    const agent = await startNodeAgent({ ...n, headAddress: head.address, token, sessionDir });
    nodes.push(agent);
    return agent;
  };
  let node: NodeAgent;
  try {
    node = await addNode(opts.node);
  } catch (e) {
    await head.close();
    throw e;
  }
  return {
    head,
    node,
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
