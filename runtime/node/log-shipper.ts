/**
 * Ships worker log files to the head (a node agent on another machine, `shipLogs`): every
 * `intervalMs` it sends what is new in each file from the offset the head has, so the head keeps
 * every worker's logs and they outlive the node. While the head is unreachable nothing is lost:
 * the offsets simply wait. A finished worker's files are sent to their end, then dropped.
 *
 * @module
 */
import type { WriteStream } from 'node:fs';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import type { Connection } from '../transport.ts';

interface Shipped {
  actorId: string;
  incarnation: number;
  stream: 'stdout' | 'stderr';
  offset: number;
  done: boolean;
}

/** A worker's two log files. */
export interface LogFiles {
  readonly stdout: string;
  readonly stderr: string;
}

/** The log files being shipped, with the offset the head has. */
export class LogShipper {
  private readonly files = new Map<string, Shipped>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    /** The connection to the head now (it changes when the agent reconnects). */
    private readonly conn: () => Connection,
    private readonly intervalMs: number,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.ship(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** Starts shipping a worker's files (from offset 0). */
  add(actorId: string, incarnation: number, files: LogFiles): void {
    for (const [path, stream] of [
      [files.stdout, 'stdout'],
      [files.stderr, 'stderr'],
    ] as const) {
      this.files.set(path, { actorId, incarnation, stream, offset: 0, done: false });
    }
  }

  /** The worker exited: ships the last bytes once both files are flushed, then drops them. */
  finish(files: LogFiles, out: WriteStream, err: WriteStream): void {
    let open = 2;
    const finished = () => {
      if (--open > 0) return;
      for (const p of [files.stdout, files.stderr]) {
        const f = this.files.get(p);
        if (f) f.done = true;
      }
      this.ship();
    };
    for (const w of [out, err]) {
      if (w.writableFinished) queueMicrotask(finished);
      else w.once('finish', finished);
    }
  }

  /**
   * Sends what is new in each shipped file, from the offset the head has; while the head is
   * unreachable nothing is lost, the offsets simply wait. Finished files are dropped once sent.
   */
  ship(): void {
    const conn = this.conn();
    if (conn.closed) return;
    for (const [path, f] of this.files) {
      let fd: number | undefined;
      try {
        fd = openSync(path, 'r');
        const size = fstatSync(fd).size;
        while (f.offset < size) {
          const len = Math.min(256 * 1024, size - f.offset);
          const data = Buffer.allocUnsafe(len);
          const n = readSync(fd, data, 0, len, f.offset);
          if (n <= 0) break;
          conn.send({
            type: 'workerLog',
            actorId: f.actorId,
            incarnation: f.incarnation,
            stream: f.stream,
            offset: f.offset,
            data: data.subarray(0, n),
          });
          f.offset += n;
        }
        if (f.done) this.files.delete(path);
      } catch {
        if (f.done) this.files.delete(path);
      } finally {
        if (fd !== undefined) closeSync(fd);
      }
    }
  }
}
