/**
 * Spilled objects: when a process's object store holds more than its cap, it writes the
 * least recently used large values to files on disk and drops them from memory; a get reads a
 * file back (`readSpill`). Files hold a value in the layout of `runtime/out-of-band.ts`, so a
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
import { unlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readEnv } from '../env.ts';
import { decodeOutOfBand, encodeOutOfBand } from '../out-of-band.ts';
import { ExitRemovals, privateDir, readExactly, removeFilesOf, uid } from './object-files.ts';

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

/**
 * Writes `value` (the object `id`) to a new spill file, synchronously: a put that goes over the
 * cap returns once the memory is given back. Undefined when there is no usable directory; throws
 * when the write fails (a full disk), leaving no file.
 */
export function writeSpill(value: unknown, id: string): SpillFile | undefined {
  const d = dir();
  if (!d) return undefined;
  const path = join(d, `${process.pid}-${id.replace(/[^A-Za-z0-9_]/g, '_')}`);
  const { parts, total } = encodeOutOfBand(value);
  const fd = openSync(path, 'wx', 0o600);
  own.add(path);
  try {
    let pos = 0;
    for (const p of parts) {
      for (let o = 0; o < p.byteLength; ) {
        const n = writeSync(fd, p, o, p.byteLength - o, pos);
        o += n;
        pos += n;
      }
    }
  } catch (e) {
    closeSync(fd);
    removeSpill(path);
    throw e;
  }
  closeSync(fd);
  return { path, bytes: total };
}

/** Reads a spilled value back: one read into a buffer of its size, arrays viewing it. */
export async function readSpill(f: SpillFile): Promise<unknown> {
  return decodeOutOfBand(await readExactly(f.path, f.bytes, `spilled object ${f.path}`));
}

/** Removes a spill file (the object was freed). */
export function removeSpill(path: string): void {
  own.delete(path);
  void unlink(path).catch(() => {});
}

/** Removes the spill files a process (now gone) left; the node agent calls it as a worker ends. */
export function removeSpillFilesOf(pid: number): void {
  removeFilesOf(spillDirPath(), pid);
}

/** Opens the spill directory now (sweeping files of processes that are gone); its path, if usable. */
export function openSpillDir(): string | undefined {
  return dir();
}
