/**
 * Same-machine object transfer through shared memory: a value whose typed arrays add up to at
 * least `shmMinBytes` is written once to a file in `/dev/shm/rtjob-<uid>/` (tmpfs: memory, not
 * disk) and the peer gets only the file's name and size over the socket. A reader maps the file
 * copy-on-write (`shm-map.ts`): no copy, the pages shared by every reader of the machine; where
 * the mapper is unavailable it reads the file with one read into a buffer of exactly that size.
 * Either way its typed arrays are views into the file's bytes.
 *
 * A file a reader may have mapped is never rewritten (the reader would see the change, or fault
 * on a shorter file): a freed object's file is removed, and a call result read by a mapping
 * reader is removed by that reader. Only a file every reader of which copied it is reused (a
 * reader that reads hands a call result back, renamed `<name>_done`), since overwriting a file's
 * existing tmpfs pages costs a fraction of allocating new ones.
 *
 * A file holds the value in the layout of `runtime/out-of-band.ts`: a small packed skeleton, then
 * each large typed array's bytes, aligned.
 *
 * Only a peer on the same machine (the same `/dev/shm` mount, see `machineId`) is offered a file;
 * the directory is private to the user (0700); names are checked so a peer cannot point a reader
 * outside it. A worker's files are removed by its node agent when it exits, and files of any
 * other process that died by the next process to use the directory.
 *
 * @module
 */
import { readFileSync, statSync } from 'node:fs';
import { type FileHandle, open, rename, unlink } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { readEnv } from '../env.ts';
import { decodeOutOfBand, encodeOutOfBand, installOutOfBandCodec } from '../out-of-band.ts';
import { registerWireClass } from '../protocol.ts';
import { ProtocolError } from '../errors.ts';
import { logger } from '../log.ts';
import {
  ExitRemovals,
  privateDir,
  readExactly,
  removeFilesOf,
  uid,
  writeAll,
} from './object-files.ts';
import { mapFile } from './shm-map.ts';

const log = logger('objects');

/** Values with fewer typed-array bytes than this go over the socket. */
export const shmMinBytes = 1 << 20;

/** A value written to shared memory, as it travels on the wire: the file's name and size. */
export class ShmValue {
  constructor(
    readonly name: string,
    readonly bytes: number,
    /**
     * Read exactly once (a call result): the reader removes the file, or hands it back for the
     * writer to reuse (renamed `<name>_done`) when `handBack` and it copied the file.
     */
    readonly oneShot: boolean,
    readonly handBack = false,
  ) {}
}

/**
 * `GLIBC_TUNABLES` for a process that should back its large allocations (array buffers of
 * fetched objects) with transparent huge pages: glibc's `malloc.hugetlb=1` madvises what it maps,
 * so a fresh 64 MiB buffer costs 32 page faults instead of 16,384 (measured 3-8x faster to fill on
 * a kernel whose THP mode is `madvise`). Keeps a `malloc.hugetlb` the caller set; other libcs
 * ignore the variable. Applies at process start only, so it goes into a child's environment.
 */
export function largePageMallocEnv(tunables: string | undefined): string {
  if (tunables?.includes('glibc.malloc.hugetlb')) return tunables;
  return tunables ? `${tunables}:glibc.malloc.hugetlb=1` : 'glibc.malloc.hugetlb=1';
}

let registered = false;
/** Registers the codec extensions this module needs; called once per process. */
export function installShmCodec(): void {
  if (registered) return;
  registered = true;
  registerWireClass<ShmValue, [string, number, boolean, boolean]>({
    type: 3,
    Class: ShmValue,
    write: (v) => [v.name, v.bytes, v.oneShot, v.handBack],
    read: ([name, bytes, oneShot, handBack]) =>
      new ShmValue(String(name), Number(bytes), oneShot === true, handBack === true),
  });
  installOutOfBandCodec();
}

let machine: string | undefined | null = null;
/**
 * Identifies this machine's `/dev/shm`: host name, boot id and the mount's device and inode, so
 * two containers on one host with separate `/dev/shm` mounts do not match. Undefined where there
 * is no usable `/dev/shm` or `RTJOB_OBJECT_SHM=0`.
 */
export function machineId(): string | undefined {
  if (machine !== null) return machine;
  machine = undefined;
  if (readEnv('RTJOB_OBJECT_SHM') === false) return machine;
  try {
    const st = statSync('/dev/shm');
    if (!st.isDirectory()) return machine;
    let boot = '';
    try {
      boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    } catch {
      // Not Linux: host name and mount identify the machine well enough.
    }
    if (!dir()) return machine;
    machine = `${hostname()}|${boot}|${st.dev}|${st.ino}`;
  } catch {
    machine = undefined;
  }
  return machine;
}

let dirPath: string | undefined | null = null;
/** `/dev/shm/rtjob-<uid>`, private to this user, or undefined where it cannot be used. */
function dir(): string | undefined {
  if (dirPath === null) dirPath = privateDir(shmDirOf(), 'objects go over sockets');
  return dirPath;
}

/** Where this user's shared-memory files live. */
function shmDirOf(): string {
  return `/dev/shm/rtjob-${uid()}`;
}

/** Removes the files a process (now gone) left behind; the node agent calls it as a worker ends. */
export function removeShmFilesOf(pid: number): void {
  removeFilesOf(shmDirOf(), pid);
}

const own = new ExitRemovals((f) => [f, `${f}_done`]);

const validName = /^[0-9]+-[A-Za-z0-9_]+$/;
let seq = 0;

/**
 * Writes `value` to a new shared-memory file named after `id`; resolves with its wire form, or
 * undefined when shared memory is unavailable. The caller removes it with `removeShm`, but for a
 * one-shot (a call result), which its reader removes, or hands back for reuse when `handBack`
 * (a reader that copies, never one that maps).
 */
export async function writeShm(
  value: unknown,
  id: string,
  oneShot: boolean,
  handBack = false,
): Promise<ShmValue | undefined> {
  const d = dir();
  if (!d) return undefined;
  const name = `${process.pid}-${id.replace(/[^A-Za-z0-9_]/g, '_')}${oneShot ? `_${seq++}` : ''}`;
  const { parts, total } = encodeOutOfBand(value);
  const path = join(d, name);
  const fh = await openForWrite(path);
  own.add(path);
  try {
    await writeAll(fh, parts);
    await fh.truncate(total);
  } catch (e) {
    await fh.close().catch(() => {});
    await removeShm(name, true);
    throw e;
  }
  await fh.close();
  if (oneShot && handBack) {
    handedOut.push(path);
    // One not handed back by now is left to its reader (or to the sweep of this process's files).
    if (handedOut.length > maxPooled * 4) own.delete(handedOut.shift()!);
  } else if (oneShot) {
    own.delete(path); // the reader removes it
  }
  return new ShmValue(name, total, oneShot, oneShot && handBack);
}

/**
 * Files this process wrote and no longer needs, kept for reuse: overwriting a file's existing
 * tmpfs pages costs a fraction of allocating (and zeroing) new ones.
 */
const pool: string[] = [];
const maxPooled = 2;
/** One-shot files handed to readers, who rename them to `<name>_done` when they are done. */
const handedOut: string[] = [];

/** Opens `path` for writing, renaming a pooled or returned file to it when there is one. */
async function openForWrite(path: string): Promise<FileHandle> {
  for (let i = handedOut.length - 1; i >= 0; i--) {
    const done = `${handedOut[i]}_done`;
    try {
      await rename(done, path);
      own.delete(handedOut[i]!);
      handedOut.splice(i, 1);
      return await open(path, 'r+');
    } catch {
      // Not returned yet.
    }
  }
  const reuse = pool.pop();
  if (reuse) {
    try {
      await rename(reuse, path);
      own.delete(reuse);
      return await open(path, 'r+');
    } catch {
      // Gone; make a new one.
    }
  }
  return open(path, 'wx', 0o600);
}

/** How this process got the shared-memory values it read: mapped, or copied into a buffer. */
const reads = { mapped: 0, copied: 0 };

/** Counts of the shared-memory values this process mapped and copied (tests, benchmarks). */
export function shmReads(): { mapped: number; copied: number } {
  return { ...reads };
}

/**
 * Reads a shared-memory value: maps the file (copy-on-write, `shm-map.ts`) where the mapper is
 * available, else one read of the size the writer announced into a buffer of exactly that size;
 * the value's arrays are views into it. A one-shot is then removed, or handed back to its writer
 * for reuse when it asked and the file was copied (a mapped file is never rewritten).
 */
export async function readShm(v: ShmValue): Promise<unknown> {
  const d = dir();
  if (!d || !validName.test(v.name))
    throw new ProtocolError(`not a shared-memory object name: '${v.name.slice(0, 80)}'`);
  const path = join(d, v.name);
  const handBack = v.oneShot && v.handBack;
  let file: Buffer | undefined;
  try {
    if (!handBack) {
      try {
        file = mapFile(path, v.bytes);
      } catch (e) {
        log.debug(`mapping ${v.name} failed (${(e as Error).message}); reading it`);
      }
    }
    if (file) reads.mapped++;
    else {
      file = await readExactly(path, v.bytes, `shared-memory object ${v.name}`);
      reads.copied++;
    }
  } finally {
    if (handBack) await rename(path, `${path}_done`).catch(() => {});
    else if (v.oneShot) await unlink(path).catch(() => {});
  }
  try {
    return decodeOutOfBand(file);
  } catch (e) {
    throw new ProtocolError(`shared-memory object ${v.name}: ${(e as Error).message}`, {
      cause: e,
    });
  }
}

/**
 * Gives up a file this process wrote: removed, or, when `reuse` (no reader mapped it), kept for
 * reuse while the pool has room.
 */
export async function removeShm(name: string, reuse: boolean): Promise<void> {
  const d = dir();
  if (!d) return;
  const path = join(d, name);
  if (reuse && pool.length < maxPooled) {
    const spare = join(d, `${process.pid}-spare_${seq++}`);
    try {
      await rename(path, spare);
      own.delete(path);
      own.add(spare);
      pool.push(spare);
      return;
    } catch {
      // Fall through to removing it.
    }
  }
  own.delete(path);
  await unlink(path).catch(() => {});
}
