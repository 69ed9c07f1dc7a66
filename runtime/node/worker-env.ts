/**
 * How a node agent starts a worker process: its command line (Node with rtjob's cached
 * TypeScript loader, or tsx) and its environment (the agent's, the node's `env`, the actor's, and
 * what the worker must know: head address, token, actor, incarnation, node, GPUs), with glibc
 * backing large allocations by huge pages.
 *
 * @module
 */
import { largePageMallocEnv } from '../client/shm.ts';
import { checkoutNodeFlags, ownModulePath } from '../own-files.ts';
import { readEnv } from '../env.ts';
import type { StartWorker } from '../protocol.ts';

const workerMain = ownModulePath('../worker/main.ts', import.meta.url);
const loaders = {
  cached: new URL('../worker/ts-loader.mjs', import.meta.url).href,
  tsx: import.meta.resolve('tsx'),
} as const;

/** What of the agent's options a worker's start needs. */
export interface WorkerStartOptions {
  readonly headAddress: string;
  readonly token: string;
  readonly host?: string;
  readonly env?: Record<string, string>;
  readonly workerLoader?: 'cached' | 'tsx';
  readonly reconnectMs?: number;
}

/**
 * Node's flags that load user TypeScript as a worker does: rtjob's cached loader, or tsx
 * (`RTJOB_WORKER_LOADER`). `rtjob eval` runs its agent under the same flags.
 */
export function typescriptNodeFlags(loader?: 'cached' | 'tsx'): string[] {
  const kind = loader ?? readEnv('RTJOB_WORKER_LOADER') ?? 'cached';
  return [...checkoutNodeFlags, '--import', loaders[kind]];
}

/** Node's arguments for a worker process. */
export function workerArgv(o: WorkerStartOptions): string[] {
  return [...typescriptNodeFlags(o.workerLoader), workerMain];
}

/**
 * A worker's environment with glibc backing large allocations by huge pages (see
 * `largePageMallocEnv`): a worker's fetched objects and results land in fresh buffers.
 */
export function withLargePages(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { ...env, GLIBC_TUNABLES: largePageMallocEnv(env.GLIBC_TUNABLES) };
}

/**
 * The environment of the worker `m` asks for, on node `nodeId`. A node that declares GPUs gives
 * each worker exactly its own (none: an empty list); a node that declares none manages none, and
 * its workers see the `CUDA_VISIBLE_DEVICES` the agent sees.
 */
export function workerEnv(
  o: WorkerStartOptions,
  m: StartWorker,
  nodeId: string,
  sessionDir: string,
  declaresGpus: boolean,
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...o.env,
    ...m.env,
    RTJOB_HEAD_ADDRESS: o.headAddress,
    RTJOB_TOKEN: o.token,
    RTJOB_ACTOR_ID: m.actorId,
    RTJOB_INCARNATION: String(m.incarnation),
    RTJOB_NODE_ID: nodeId,
    RTJOB_SESSION_DIR: sessionDir,
    RTJOB_WORKER_HOST: o.host ?? '127.0.0.1',
    ...(declaresGpus ? { CUDA_VISIBLE_DEVICES: m.gpuIds.join(',') } : {}),
    ...((o.reconnectMs ?? 0) > 0 ? { RTJOB_HEAD_RECONNECT_MS: String(o.reconnectMs) } : {}),
  };
  delete env.RTJOB_ADDRESS;
  return env;
}

/**
 * What a booted (warm) worker is told when it becomes an actor: only what differs from the
 * agent's own environment travels, and what it must drop; the worker applies it before importing
 * any user code (so `CUDA_VISIBLE_DEVICES` is in place for CUDA).
 */
export function assignMessage(env: NodeJS.ProcessEnv): {
  type: 'assign';
  env: Record<string, string>;
  unset: string[];
} {
  const delta: Record<string, string> = {};
  for (const [k, v] of Object.entries(env))
    if (v !== undefined && process.env[k] !== v) delta[k] = v;
  return {
    type: 'assign',
    env: delta,
    unset: ['RTJOB_WARM', ...(readEnv('RTJOB_ADDRESS') !== undefined ? ['RTJOB_ADDRESS'] : [])],
  };
}
