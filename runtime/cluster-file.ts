/**
 * `~/.rtjob/cluster.json`: how this machine reaches the cluster that `rtjob start` started (or
 * joined). Written with mode 0600 because it holds the cluster token. The one reader and writer
 * of that file: `init()`, the metrics logger and the CLI all come here.
 *
 * @module
 */
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { readEnv } from './env.ts';
import { pidAlive } from './pid.ts';

/** What `rtjob start` records. */
export interface ClusterFile {
  /** The runtime's WebSocket address (`127.0.0.1:6380`); what nodes and drivers connect to. */
  address: string;
  /** The head's HTTP API and dashboard. Absent for a node that only joined. */
  dashboardUrl?: string;
  token: string;
  sessionDir: string;
  /** Processes `rtjob stop` stops on this machine (head daemon, node agents). */
  pids: number[];
  /** The head daemon's pid (the others are node agents); absent for a node that only joined. */
  headPid?: number;
  role: 'head' | 'node';
  startedAt: number;
}

/** `$RTJOB_HOME`, else `~/.rtjob`. */
export function rtjobHome(): string {
  return readEnv('RTJOB_HOME') ?? join(homedir(), '.rtjob');
}

/** Where `cluster.json` is. */
export function clusterFilePath(): string {
  return join(rtjobHome(), 'cluster.json');
}

/**
 * The cluster file, or undefined when there is none (or it does not parse).
 *
 * @param opts.live only when a process it records is still running (a head that died leaves a
 *   stale file behind until `rtjob stop` or the next `rtjob start`)
 */
export function readClusterFile(opts: { live?: boolean } = {}): ClusterFile | undefined {
  let info: ClusterFile;
  try {
    info = JSON.parse(readFileSync(clusterFilePath(), 'utf8')) as ClusterFile;
  } catch {
    return undefined;
  }
  if (opts.live && !(info.pids ?? []).some(pidAlive)) return undefined;
  return info;
}

/** Writes the file atomically, mode 0600 (it holds the token). */
export function writeClusterFile(info: ClusterFile): void {
  mkdirSync(rtjobHome(), { recursive: true, mode: 0o700 });
  const tmp = `${clusterFilePath()}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(info, null, 2) + '\n', { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, clusterFilePath());
}

/** Deletes the file (after `rtjob stop`). */
export function removeClusterFile(): void {
  if (existsSync(clusterFilePath())) rmSync(clusterFilePath(), { force: true });
}
