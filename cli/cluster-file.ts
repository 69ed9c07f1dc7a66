/**
 * `~/.rtjob/cluster.json`: how this machine reaches the cluster that `rtjob start` started (or
 * joined). Written with mode 0600 because it holds the cluster token.
 *
 * @module
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

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
  return process.env.RTJOB_HOME ?? join(homedir(), '.rtjob');
}

export function clusterFilePath(): string {
  return join(rtjobHome(), 'cluster.json');
}

export function readClusterFile(): ClusterFile | undefined {
  try {
    return JSON.parse(readFileSync(clusterFilePath(), 'utf8')) as ClusterFile;
  } catch {
    return undefined;
  }
}

export function writeClusterFile(info: ClusterFile): void {
  mkdirSync(rtjobHome(), { recursive: true, mode: 0o700 });
  const tmp = `${clusterFilePath()}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(info, null, 2) + '\n', { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, clusterFilePath());
}

export function removeClusterFile(): void {
  if (existsSync(clusterFilePath())) rmSync(clusterFilePath(), { force: true });
}

/** True when a process with this pid exists. */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
