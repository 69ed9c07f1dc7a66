/**
 * Worker logs: every worker's stdout and stderr, as its node agent writes them
 * (`<node session>/logs/worker-<actorId>-<incarnation>.out|.err`), indexed in `ops_log_files` so
 * they stay findable after the worker, its node or the head is gone; and read back for one actor
 * as one stream, resumable with a cursor.
 *
 * @module
 */
import { closeSync, existsSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';

import type { LogFile, OpsStore } from '../jobs/ops-store.ts';
import { readLogRange } from './log-file.ts';

/** The two files a node agent writes for one worker incarnation. */
export function workerLogPaths(
  nodeSessionDir: string,
  actorId: string,
  incarnation: number,
): { stdout: string; stderr: string } {
  const base = join(nodeSessionDir, 'logs', `worker-${actorId}-${incarnation}`);
  return { stdout: `${base}.out`, stderr: `${base}.err` };
}

/** Where the head keeps the logs that a node on another machine ships to it. */
export function shippedLogDir(headSessionDir: string, nodeId: string): string {
  return join(headSessionDir, 'nodes', nodeId);
}

/** One shipped piece of a worker's output (the runtime's `workerLog` message, with its node). */
export interface ShippedLog {
  nodeId: string;
  actorId: string;
  incarnation: number;
  stream: 'stdout' | 'stderr';
  offset: number;
  data: Uint8Array;
}

const safeId = /^[A-Za-z0-9_.:-]{1,128}$/;

/**
 * Writes a shipped piece at its offset in the head's copy (idempotent, so a piece sent twice
 * after a reconnect does no harm). Pieces that do not look right are dropped: ids become paths.
 */
export function writeShippedLog(headSessionDir: string, piece: ShippedLog): boolean {
  const { nodeId, actorId, incarnation, stream, offset, data } = piece;
  if (
    !safeId.test(nodeId) ||
    !safeId.test(actorId) ||
    !Number.isInteger(incarnation) ||
    incarnation < 0
  )
    return false;
  if (
    (stream !== 'stdout' && stream !== 'stderr') ||
    !Number.isInteger(offset) ||
    offset < 0 ||
    !(data instanceof Uint8Array)
  )
    return false;
  const paths = workerLogPaths(shippedLogDir(headSessionDir, nodeId), actorId, incarnation);
  mkdirSync(join(shippedLogDir(headSessionDir, nodeId), 'logs'), { recursive: true });
  const path = stream === 'stdout' ? paths.stdout : paths.stderr;
  // Not 'a': in append mode the offset would be ignored and a re-sent piece written twice.
  const fd = existsSync(path) ? openSync(path, 'r+') : openSync(path, 'w+');
  try {
    writeSync(fd, data, 0, data.length, offset);
  } finally {
    closeSync(fd);
  }
  return true;
}

/** What the indexer needs to know about an actor incarnation. */
export interface WorkerLogSubject {
  actorId: string;
  incarnation: number;
  nodeId: string;
  jobId: string | null;
  pid: number | null;
}

/**
 * Records an incarnation's log files (idempotent). `nodeSessionDir` is where its node agent
 * writes; for a remote node that ships its logs it is the head's copy.
 */
export function indexWorkerLogs(
  store: OpsStore,
  s: WorkerLogSubject,
  nodeSessionDir: string,
): void {
  const paths = workerLogPaths(nodeSessionDir, s.actorId, s.incarnation);
  const createdAt = Date.now();
  for (const path of [paths.stdout, paths.stderr]) {
    store.addLogFile({
      path,
      kind: 'worker',
      jobId: s.jobId,
      actorId: s.actorId,
      nodeId: s.nodeId,
      pid: s.pid,
      createdAt,
    });
  }
}

const incarnationOf = (f: LogFile) => Number(/-(\d+)\.(out|err)$/.exec(f.path)?.[1] ?? 0);
const streamOf = (f: LogFile) => (f.path.endsWith('.err') ? 'stderr' : 'stdout');

/** One page of an actor's logs. */
export interface ActorLogPage {
  /** New text: per incarnation, its stdout then its stderr, complete lines only while it runs. */
  logs: string;
  /** Pass back as `cursor` to get what comes next. */
  cursor: string;
  files: { path: string; stream: 'stdout' | 'stderr'; incarnation: number; nextOffset: number }[];
}

/**
 * Reads what is new in an actor's log files since `cursor` (one byte offset per file, in file
 * order; files added later start at 0). While an incarnation runs (`liveIncarnation`), only
 * whole lines are returned so stdout and stderr never split a line between them.
 */
export function readActorLogs(
  files: readonly LogFile[],
  cursor: string | undefined,
  opts: { liveIncarnation?: number; maxBytes?: number } = {},
): ActorLogPage {
  const ordered = [...files].sort(
    (a, b) =>
      incarnationOf(a) - incarnationOf(b) ||
      (streamOf(a) === streamOf(b) ? 0 : streamOf(a) === 'stdout' ? -1 : 1),
  );
  const offsets = (cursor ?? '').split(',').map((x) => Number(x) || 0);
  let budget = opts.maxBytes ?? 1 << 20;
  const parts: string[] = [];
  const out: ActorLogPage['files'] = [];
  ordered.forEach((f, i) => {
    const inc = incarnationOf(f);
    let offset = Math.max(0, offsets[i] ?? 0);
    if (budget > 0) {
      const { data } = readLogRange(f.path, offset, budget);
      let take = data;
      if (inc === opts.liveIncarnation) {
        const nl = data.lastIndexOf(0x0a);
        take = nl < 0 ? data.subarray(0, 0) : data.subarray(0, nl + 1);
      }
      if (take.length > 0) {
        if (offset === 0 && inc > 1 && streamOf(f) === 'stdout')
          parts.push(`--- restart ${inc - 1} (incarnation ${inc}) ---\n`);
        parts.push(take.toString('utf8'));
        offset += take.length;
        budget -= take.length;
      }
    }
    out.push({ path: f.path, stream: streamOf(f), incarnation: inc, nextOffset: offset });
  });
  return { logs: parts.join(''), cursor: out.map((f) => f.nextOffset).join(','), files: out };
}
