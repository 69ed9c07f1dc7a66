/**
 * What a download shows: on a terminal one line redrawn in place (files, bytes, rate, time
 * left); otherwise (a log file, a job's output) one line per file fetched.
 *
 * @module
 */
import { bytes, duration } from '../../runtime/format.ts';

/** Where progress goes. */
export interface ProgressSink {
  /** Writes text as is (the TTY line uses `\r`). */
  write(text: string): void;
  /** Whether it is a terminal. */
  readonly tty: boolean;
}

/** Counts one repo's download and draws it. */
export interface Progress {
  /** `n` more bytes arrived (negative when a restart throws bytes away). */
  bytes(n: number): void;
  /** A file is whole, `size` bytes of it fetched in this run. */
  fileDone(path: string, size: number, ms: number): void;
  /** All files are whole. */
  finish(): void;
}

/** A {@link Progress} for `label` (`org/name@rev`) over `files` files of `total` bytes. */
export function progress(
  label: string,
  files: number,
  total: number,
  sink: ProgressSink,
  now: () => number = Date.now,
): Progress {
  const started = now();
  let got = 0;
  let done = 0;
  let drawnAt = 0;
  const draw = (force: boolean): void => {
    const t = now();
    if (!force && t - drawnAt < 100) return;
    drawnAt = t;
    const rate = got / Math.max(0.001, (t - started) / 1000);
    const left = rate > 0 ? duration(((total - got) / rate) * 1000) : '?';
    sink.write(
      `\r${label}: ${done}/${files} files, ${bytes(got)} / ${bytes(total)}, ${bytes(rate)}/s, ${left} left\x1b[K`,
    );
  };
  return {
    bytes: (n) => {
      got += n;
      if (sink.tty) draw(false);
    },
    fileDone: (path, size, ms) => {
      done++;
      if (sink.tty) return draw(true);
      const rate = size / Math.max(0.001, ms / 1000);
      sink.write(`${label}: ${path} ${bytes(size)} in ${duration(ms)} (${bytes(rate)}/s)\n`);
    },
    finish: () => {
      if (sink.tty) {
        draw(true);
        sink.write('\n');
      }
    },
  };
}

/** Progress on the process's stderr. */
export const stderrSink: ProgressSink = {
  write: (text) => void process.stderr.write(text),
  get tty() {
    return process.stderr.isTTY === true;
  },
};
