/**
 * Reading log files by byte offset: a range, the last lines, and a follower that streams what is
 * appended until told the writer is done. Offsets make tails resumable after a reconnect.
 *
 * @module
 */
import { closeSync, fstatSync, openSync, readSync, statSync } from 'node:fs';

/** Bytes at most returned by one read, so a huge log never blocks the head. @default 1 MiB */
export const maxReadBytes = 1 << 20;

/** Reads `[offset, offset + maxBytes)` of a file; a missing file reads as empty. */
export function readLogRange(
  path: string,
  offset = 0,
  maxBytes = maxReadBytes,
): { data: Buffer; nextOffset: number; size: number } {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return { data: Buffer.alloc(0), nextOffset: offset, size: 0 };
  }
  try {
    const size = fstatSync(fd).size;
    const start = Math.min(Math.max(0, offset), size);
    const len = Math.min(maxBytes, size - start);
    const buf = Buffer.allocUnsafe(len);
    let got = 0;
    while (got < len) {
      const n = readSync(fd, buf, got, len - got, start + got);
      if (n === 0) break;
      got += n;
    }
    return { data: buf.subarray(0, got), nextOffset: start + got, size };
  } finally {
    closeSync(fd);
  }
}

/** The last `lines` lines of a file (reads at most the last 64 KiB). */
export function tailLines(path: string, lines: number): string {
  let size: number;
  try {
    size = statSync(path).size;
  } catch {
    return '';
  }
  const window = 64 * 1024;
  const { data } = readLogRange(path, Math.max(0, size - window), window);
  const text = data.toString('utf8').replace(/\s+$/, '');
  const all = text.split('\n');
  return all.slice(-lines).join('\n');
}

/** Options of {@link followLog}. */
export interface FollowOptions {
  /** Byte offset to start from. @default 0 */
  fromOffset?: number;
  /** How often the file is checked for growth. @default 200 */
  pollMs?: number;
  /** Returns true once nothing more will be written; the follower then drains and ends. */
  isDone?: () => boolean;
}

/**
 * Streams a growing file: calls `onData` with each appended chunk and its end offset, until
 * `isDone()` and the file is drained, or until the returned `stop()` is called. Polling (not
 * fs.watch) so that it behaves the same on every filesystem, including network mounts.
 */
export function followLog(
  path: string,
  onData: (chunk: Buffer, nextOffset: number) => void,
  opts: FollowOptions = {},
): { stop(): void; done: Promise<void> } {
  let offset = opts.fromOffset ?? 0;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));
  const tick = () => {
    if (stopped) return;
    // Read isDone before draining: anything written before it turned true is then read below.
    const finished = opts.isDone?.() ?? false;
    for (;;) {
      const { data, nextOffset } = readLogRange(path, offset);
      if (data.length === 0) break;
      offset = nextOffset;
      onData(data, offset);
      if (stopped) return;
    }
    if (finished) {
      stop();
      return;
    }
    timer = setTimeout(tick, opts.pollMs ?? 200);
  };
  const stop = () => {
    if (stopped) return;
    stopped = true;
    if (timer) clearTimeout(timer);
    resolveDone();
  };
  tick();
  return { stop, done };
}
