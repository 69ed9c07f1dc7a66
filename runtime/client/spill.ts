/**
 * Spilled objects: when a process's object store holds more than its cap, it writes the
 * least recently used large values to files on disk, off the caller's thread, and drops them
 * from memory once written; a get reads a file back (`readSpill`). Files hold a value in the layout of `runtime/out-of-band.ts`, so a
 * restore is one read into one buffer that the value's typed arrays then view.
 *
 * The directory is `RTJOB_OBJECT_SPILL_DIR`, else `$TMPDIR/rtjob-spill-<uid>`, private to the
 * user (0700). A file is named after the writing process (`<pid>-<object>`) and removed when the
 * object is freed or the process exits; the node agent removes the files of a worker that died,
 * and the next process to open the directory those of any other process that is gone.
 *
 * @module
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { open, unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readEnv } from '../env.ts';
import { decodeOutOfBand, encodeOutOfBand } from '../out-of-band.ts';
import {
  ExitRemovals,
  privateDir,
  readExactly,
  removeFilesOf,
  uid,
  writeAll,
} from './object-files.ts';

/** Where this user's spilled objects go. */
export function spillDirPath(): string {
  return readEnv('RTJOB_OBJECT_SPILL_DIR') ?? join(tmpdir(), `rtjob-spill-${uid()}`);
}

let dirPath: string | undefined | null = null;
function dir(): string | undefined {
  if (dirPath === null) dirPath = privateDir(spillDirPath(), 'objects are not spilled');
  return dirPath;
}

/** A value on disk. */
export interface SpillFile {
  readonly path: string;
  readonly bytes: number;
}

const own = new ExitRemovals();

/** A new spill file's path for object `id` and the value's parts; undefined without a directory. */
function prepare(
  value: unknown,
  id: string,
): { path: string; parts: Uint8Array[]; total: number } | undefined {
  const d = dir();
  if (!d) return undefined;
  const path = join(d, `${process.pid}-${id.replace(/[^A-Za-z0-9_]/g, '_')}`);
  return { path, ...encodeOutOfBand(value) };
}

/**
 * Writes `value` (the object `id`) to a new spill file off the caller's thread (libuv's pool);
 * the caller keeps the value, which must not change, until this resolves. Undefined when there
 * is no usable directory; rejects when the write fails (a full disk), leaving no file.
 */
export async function writeSpill(value: unknown, id: string): Promise<SpillFile | undefined> {
  const f = prepare(value, id);
  if (!f) return undefined;
  const fh = await open(f.path, 'wx', 0o600);
  own.add(f.path);
  try {
    await writeAll(fh, f.parts);
  } catch (e) {
    await fh.close().catch(() => {});
    await removeSpill(f.path);
    throw e;
  }
  await fh.close();
  return { path: f.path, bytes: f.total };
}

/**
 * `writeSpill`, on the caller's thread: for a store whose writes in flight already hold as much
 * as its cap, so that a producer faster than the disk waits instead of growing without bound.
 */
export function writeSpillSync(value: unknown, id: string): SpillFile | undefined {
  const f = prepare(value, id);
  if (!f) return undefined;
  const fd = openSync(f.path, 'wx', 0o600);
  own.add(f.path);
  try {
    let pos = 0;
    for (const p of f.parts) {
      for (let o = 0; o < p.byteLength; ) {
        const n = writeSync(fd, p, o, p.byteLength - o, pos);
        o += n;
        pos += n;
      }
    }
  } catch (e) {
    closeSync(fd);
    void removeSpill(f.path);
    throw e;
  }
  closeSync(fd);
  return { path: f.path, bytes: f.total };
}

/** Reads a spilled value back: one read into a buffer of its size, arrays viewing it. */
export async function readSpill(f: SpillFile): Promise<unknown> {
  return decodeOutOfBand(await readExactly(f.path, f.bytes, `spilled object ${f.path}`));
}

/** Removes a spill file (the object was freed); resolves once it is gone. */
export function removeSpill(path: string): Promise<void> {
  own.delete(path);
  return unlink(path).catch(() => {});
}

/** Removes the spill files a process (now gone) left; the node agent calls it as a worker ends. */
export function removeSpillFilesOf(pid: number): void {
  removeFilesOf(spillDirPath(), pid);
}

/** Opens the spill directory now (sweeping files of processes that are gone); its path, if usable. */
export function openSpillDir(): string | undefined {
  return dir();
}
