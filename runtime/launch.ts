/**
 * Starting cluster processes from code: a head, a node agent, or both in this process. These
 * load the head's modules (SQLite and all) only when called, so actor code that imports 'rtjob'
 * for the client API stays light.
 *
 * @module
 */
import type { Head, HeadOptions } from './head/head.ts';
import type { LocalCluster, LocalClusterOptions } from './local-cluster.ts';
import type { NodeAgent, NodeAgentOptions } from './node/agent.ts';

/** Starts a head; see `HeadOptions`. */
export async function startHead(options: HeadOptions = {}): Promise<Head> {
  return (await import('./head/head.ts')).startHead(options);
}

/** Starts a node agent that joins the head at `options.headAddress`. */
export async function startNodeAgent(options: NodeAgentOptions): Promise<NodeAgent> {
  return (await import('./node/agent.ts')).startNodeAgent(options);
}

/** Starts a head and one node agent in this process. */
export async function startLocalCluster(options: LocalClusterOptions = {}): Promise<LocalCluster> {
  return (await import('./local-cluster.ts')).startLocalCluster(options);
}
