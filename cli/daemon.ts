/**
 * The background head process that `rtjob start --head` launches (detached, output to
 * `<session>/logs/head.log`). It writes `<session>/head.json` once it serves, and on SIGTERM
 * stops every job, worker and node agent it started before exiting.
 *
 * Usage (internal): node --import tsx cli/daemon.ts '<LocalClusterOptions as JSON>'
 *
 * @module
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { type LocalClusterOptions, startLocalCluster } from './local-cluster.ts';

const opts = JSON.parse(process.argv[2] ?? '{}') as LocalClusterOptions;
const readyFile = join(opts.sessionDir, 'head.json');
rmSync(readyFile, { force: true });

const cluster = await startLocalCluster({ ...opts, warn: (m) => console.warn(m) });
writeFileSync(
  readyFile,
  JSON.stringify({ pid: process.pid, address: cluster.address, dashboardUrl: cluster.dashboardUrl }),
  { mode: 0o600 },
);
console.log(`head ${process.pid} ready: runtime ${cluster.address || '(none)'}, dashboard ${cluster.dashboardUrl}`);

let stopping = false;
const stop = (signal: string) => {
  if (stopping) return;
  stopping = true;
  console.log(`head: ${signal}, stopping jobs and workers`);
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
