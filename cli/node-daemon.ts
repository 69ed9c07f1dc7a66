/**
 * The background node agent process that `rtjob start` launches: next to a head (`--head`) or on
 * a machine joining one (`--address`). It starts the workers the head places here and keeps them
 * running while the head restarts, reconnecting for up to `reconnectMs`. It writes
 * `<session>/node.json` once registered; on SIGTERM it stops its workers and exits.
 *
 * Usage (internal): node --import tsx cli/node-daemon.ts <file of NodeDaemonOptions as JSON, 0600; read and removed>
 *
 * @module
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readDaemonOptions } from './daemon-options.ts';

import { readEnv } from '../ops/index.ts';
import { startNodeAgent } from '../runtime/index.ts';

/** What `rtjob start` passes. */
export interface NodeDaemonOptions {
  headAddress: string;
  token: string;
  sessionDir: string;
  /** Interface this node's workers serve calls on. @default '127.0.0.1' */
  host?: string;
  numCpus?: number;
  numGpus?: number;
  resources?: Record<string, number>;
  /** Idle workers kept booted for new actors. @default 1 */
  warmWorkers?: number;
  /** Memory share past which the node kills its newest worker (1: never). @default 0.95 */
  memoryUsageThreshold?: number;
  /** Object store cap of each worker (`RTJOB_OBJECT_STORE_MEMORY`). @default 30% of RAM */
  objectStoreMemoryBytes?: number;
  /** @default 600000 */
  reconnectMs?: number;
  /** Ship worker logs to the head (a node that joined from another machine). @default false */
  shipLogs?: boolean;
}

const opts = readDaemonOptions<NodeDaemonOptions>();
const readyFile = join(opts.sessionDir, 'node.json');
rmSync(readyFile, { force: true });

const agent = await startNodeAgent({
  headAddress: opts.headAddress,
  token: opts.token ?? readEnv('RTJOB_TOKEN') ?? '',
  sessionDir: opts.sessionDir,
  host: opts.host,
  numCpus: opts.numCpus,
  numGpus: opts.numGpus,
  resources: opts.resources,
  warmWorkers: opts.warmWorkers,
  memoryUsageThreshold: opts.memoryUsageThreshold,
  ...(opts.objectStoreMemoryBytes === undefined
    ? {}
    : { env: { RTJOB_OBJECT_STORE_MEMORY: String(opts.objectStoreMemoryBytes) } }),
  reconnectMs: opts.reconnectMs ?? 10 * 60_000,
  shipLogs: opts.shipLogs,
});
writeFileSync(
  readyFile,
  JSON.stringify({ pid: process.pid, nodeId: agent.nodeId, headAddress: opts.headAddress }),
  { mode: 0o600 },
);
console.log(`node agent ${process.pid} joined ${opts.headAddress} as ${agent.nodeId}`);

let stopping = false;
const stop = (why: string) => {
  if (stopping) return;
  stopping = true;
  console.log(`node agent: ${why}, stopping workers`);
  const force = setTimeout(() => process.exit(1), 10000);
  agent
    .close()
    .catch((err: unknown) => console.error('node agent: error while stopping', err))
    .finally(() => {
      clearTimeout(force);
      rmSync(readyFile, { force: true });
      process.exit(0);
    });
};
agent.on('headLost', (reason) => stop(`the head is gone (${reason})`));
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGHUP', () => undefined);
