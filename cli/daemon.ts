/**
 * The background head process that `rtjob start --head` launches (detached, output to
 * `<session>/logs/head.log`): runtime head, jobs, HTTP API and dashboard. Its node agent runs as
 * a process of its own (`node-daemon.ts`), so a head killed and started again on the same
 * session finds the workers still running and re-attaches them. It writes `<session>/head.json`
 * once it serves, and on SIGTERM stops every job it started before exiting.
 *
 * Usage (internal): node --import tsx cli/daemon.ts <file of ClusterHeadOptions as JSON, 0600; read and removed>
 *
 * @module
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readDaemonOptions } from './daemon-options.ts';
import { type ClusterHeadOptions, readEnv, startClusterHead } from '../ops/index.ts';

import { builtinEntrypoints } from './entrypoints.ts';

/** How long drivers and workers wait for a restarted head. */
export const headReconnectMs = 10 * 60_000;

const opts = readDaemonOptions<ClusterHeadOptions>();
const readyFile = join(opts.sessionDir, 'head.json');

// A head that died without cleaning up left its ports here: take them again so node agents,
// workers and drivers that are reconnecting find the new head at the old address.
let previousPorts: ClusterHeadOptions['previousPorts'];
try {
  const old = JSON.parse(readFileSync(readyFile, 'utf8')) as {
    address: string;
    dashboardUrl: string;
  };
  previousPorts = {
    port: Number(old.address.split(':').pop()),
    dashboardPort: Number(new URL(old.dashboardUrl).port),
  };
} catch {
  previousPorts = undefined;
}
rmSync(readyFile, { force: true });

const cluster = await startClusterHead({
  ...opts,
  previousPorts,
  inProcessNode: false,
  builtins: builtinEntrypoints,
  driverReconnectMs: headReconnectMs,
  // Tests shorten the node timeout (and with it the head-restart recovery window).
  nodeHeartbeatTimeoutMs: readEnv('RTJOB_NODE_TIMEOUT_MS'),
  warn: (m) => console.warn(m),
});
writeFileSync(
  readyFile,
  JSON.stringify({
    pid: process.pid,
    address: cluster.address,
    dashboardUrl: cluster.dashboardUrl,
  }),
  { mode: 0o600 },
);
console.log(
  `head ${process.pid} ready: runtime ${cluster.address}, dashboard ${cluster.dashboardUrl}`,
);

let stopping = false;
const stop = (signal: string) => {
  if (stopping) return;
  stopping = true;
  console.log(`head: ${signal}, stopping jobs`);
  const force = setTimeout(() => process.exit(1), 15000);
  cluster
    .close({ stopJobs: true })
    .catch((err: unknown) => console.error('head: error while stopping', err))
    .finally(() => {
      clearTimeout(force);
      rmSync(readyFile, { force: true });
      process.exit(0);
    });
};
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGHUP', () => undefined);
