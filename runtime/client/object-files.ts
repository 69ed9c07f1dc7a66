/**
 * Files that hold objects outside a process's heap: shared-memory files (`shm.ts`) and spilled
 * objects (`spill.ts`). Both live in a directory private to the user (0700), are named
 * `<pid>-<object>` after the process that wrote them, and are read back whole into one buffer of
 * the size the writer announced, whose typed arrays then view it (`out-of-band.ts`).
 *
 * A writer removes its files when the object is freed and when it exits; files of a process that
 * died without doing so are removed by its node agent (`removeFilesOf`) and by the next process
 * that opens the directory (`privateDir` sweeps the files of processes that are gone, and those
 * of an earlier process that had this one's pid).
 *
 * @module
 */
import { lstatSync, mkdirSync, readdirSync, statSync, unlinkSync } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { ProtocolError } from '../errors.ts';
import { logger } from '../log.ts';
import { pidAlive } from '../pid.ts';

const log = logger('objects');

/**
 * The files a process removes when it exits: `add` when one is written, `delete` when it is
 * removed or handed on. `related` names the files that go with each (a marker beside it).
 */
export class ExitRemovals {
  private readonly paths = new Set<string>();
  private hooked = false;

  constructor(private readonly related: (path: string) => string[] = (p) => [p]) {}

  add(path: string): void {
    this.paths.add(path);
    if (this.hooked) return;
    this.hooked = true;
    process.on('exit', () => {
      for (const f of this.paths) {
        for (const p of this.related(f)) {
          try {
            unlinkSync(p);
          } catch {
            // Already gone.
          }
        }
      }
    });
  }

  delete(path: string): void {
    this.paths.delete(path);
  }
}

/** This user's id (the directories are per user). */
export function uid(): number {
  return typeof process.getuid === 'function' ? process.getuid() : userInfo().uid;
}

/**
 * Creates `path` (0700) when missing and checks that it is a directory of this user that nobody
 * else may enter; then removes the files of processes that are gone. Undefined, with one warning
 * naming `what` goes elsewhere, when it cannot be used.
 */
export function privateDir(path: string, what: string): string | undefined {
  try {
    mkdirSync(path, { mode: 0o700, recursive: true });
    const st = lstatSync(path);
    if (!st.isDirectory() || st.uid !== uid() || (st.mode & 0o077) !== 0) {
      log.warn(`${path} is not a private directory of this user; ${what}`);
      return undefined;
    }
    sweep(path);
    return path;
  } catch (e) {
    log.warn(`cannot use ${path} (${(e as Error).message}); ${what}`);
    return undefined;
  }
}

/**
 * Removes files left by processes that are gone (named `<pid>-...`). A file named with this
 * process's own pid but older than this process was left by an earlier process that had the same
 * pid (pids are reused): it goes too, or this process's write of that name would find it there.
 */
function sweep(dir: string): void {
  const started = Date.now() - process.uptime() * 1000;
  for (const name of readdirSync(dir)) {
    const pid = Number(name.slice(0, name.indexOf('-')));
    if (!Number.isInteger(pid) || pid <= 0) continue;
    const path = join(dir, name);
    try {
      if (pid === process.pid ? statSync(path).mtimeMs >= started : pidAlive(pid)) continue;
      unlinkSync(path);
    } catch {
      // Another process swept it first.
    }
  }
}

/** Removes the files that process `pid` (now gone) left in `dir`. */
export function removeFilesOf(dir: string, pid: number): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.startsWith(`${pid}-`)) continue;
    try {
      unlinkSync(join(dir, name));
    } catch {
      // Already gone.
    }
  }
}

/**
 * Reads the file at `path` into a new buffer of exactly `bytes` bytes (one read per chunk the
 * kernel hands back); fails when the file is shorter. `what` names the file in errors.
 */
export async function readExactly(path: string, bytes: number, what: string): Promise<Buffer> {
  const fh = await open(path, 'r');
  const file = Buffer.allocUnsafeSlow(bytes);
  try {
    let got = 0;
    while (got < bytes) {
      const r = await fh.read(file, got, bytes - got, got);
      if (r.bytesRead === 0) throw new ProtocolError(`${what} is truncated`);
      got += r.bytesRead;
    }
  } finally {
    await fh.close();
  }
  return file;
}

/** Writes `parts` back to back from position 0: `writev` in batches, finishing short writes. */
export async function writeAll(fh: FileHandle, parts: Uint8Array[]): Promise<void> {
  let pos = 0;
  for (let i = 0; i < parts.length; i += 256) {
    const batch = parts.slice(i, i + 256);
    const want = batch.reduce((n, p) => n + p.byteLength, 0);
    let done = (await fh.writev(batch, pos)).bytesWritten;
    let at = 0;
    for (const p of batch) {
      const skip = Math.max(0, Math.min(p.byteLength, done - at));
      at += p.byteLength;
      let o = skip;
      while (o < p.byteLength) {
        const r = await fh.write(p, o, p.byteLength - o, pos + at - p.byteLength + o);
        o += r.bytesWritten;
      }
    }
    done = want;
    pos += done;
  }
}
