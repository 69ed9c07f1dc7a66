/**
 * Same-machine object transfer through shared memory: a value whose typed arrays add up to at
 * least `shmMinBytes` is written once to a file in `/dev/shm/rtjob-<uid>/` (tmpfs: memory, not
 * disk) and the peer gets only the file's name; it reads the file in one go and its typed arrays
 * are views into what it read. Each array is copied twice in all (into tmpfs, out of it), against
 * the socket path's msgpack, fragment, frame and reassembly copies.
 *
 * File layout: `'RTS1'`, the skeleton's length (u32 LE), the skeleton (the value packed with the
 * ordinary codec, each large typed array replaced by a segment marker), then each array's bytes
 * at a 64-byte aligned offset.
 *
 * Only a peer on the same machine (the same `/dev/shm` mount, see `machineId`) is offered a file;
 * the directory is private to the user (0700); names are checked so a peer cannot point a reader
 * outside it. Files of processes that died are removed by the next process to use the directory.
 *
 * @module
 */
import { lstatSync, mkdirSync, readdirSync, readFileSync, statSync, unlinkSync } from 'node:fs';
import { type FileHandle, open, unlink } from 'node:fs/promises';
import { hostname, userInfo } from 'node:os';
import { join } from 'node:path';
import { readEnv } from '../env.ts';
import { pidAlive } from '../pid.ts';
import { logger } from '../log.ts';
import { pack, registerWireClass, unpack } from '../protocol.ts';

const log = logger('shm');

/** Values with fewer typed-array bytes than this go over the socket. */
export const shmMinBytes = 1 << 20;
/** Typed arrays smaller than this stay inside the skeleton. */
const segmentMinBytes = 64 << 10;
const align = 64;
const MAGIC = 0x31535452; // 'RTS1'

/** A value written to shared memory, as it travels on the wire: the file's name and size. */
export class ShmValue {
  constructor(
    readonly name: string,
    readonly bytes: number,
    /** The reader removes the file after reading (call results, read exactly once). */
    readonly oneShot: boolean,
  ) {}
}

/** A large typed array inside a skeleton: where its bytes lie in the file. */
class Segment {
  constructor(
    readonly kind: number,
    readonly offset: number,
    readonly length: number,
  ) {}
}

const kinds = [
  Float32Array,
  Float64Array,
  Int8Array,
  Uint8Array,
  Uint8ClampedArray,
  Int16Array,
  Uint16Array,
  Int32Array,
  Uint32Array,
  BigInt64Array,
  BigUint64Array,
] as const;
const bufferKind = kinds.length;

/** The file being decoded (extension readers have no context argument; decoding is synchronous). */
let decoding: Buffer | undefined;

let registered = false;
/** Registers the two codec extensions this module needs; called once per process. */
export function installShmCodec(): void {
  if (registered) return;
  registered = true;
  registerWireClass<ShmValue, [string, number, boolean]>({
    type: 3,
    Class: ShmValue,
    write: (v) => [v.name, v.bytes, v.oneShot],
    read: ([name, bytes, oneShot]) => new ShmValue(String(name), Number(bytes), oneShot === true),
  });
  registerWireClass<Segment, [number, number, number]>({
    type: 4,
    Class: Segment,
    write: (s) => [s.kind, s.offset, s.length],
    read: ([kind, offset, length]) => viewOf(kind, offset, length) as Segment,
  });
}

function viewOf(kind: number, offset: number, length: number): unknown {
  const file = decoding;
  if (!file) throw new Error('a shared-memory segment outside a shared-memory file');
  const C = kind === bufferKind ? Uint8Array : kinds[kind];
  if (!C || offset < 0 || offset + length * C.BYTES_PER_ELEMENT > file.length) {
    throw new Error('malformed shared-memory segment');
  }
  const at = file.byteOffset + offset;
  if (kind === bufferKind) return Buffer.from(file.buffer, at, length);
  if (at % C.BYTES_PER_ELEMENT === 0) return new C(file.buffer as ArrayBuffer, at, length);
  return new C(file.buffer.slice(at, at + length * C.BYTES_PER_ELEMENT) as ArrayBuffer);
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
function dir(): string | undefined {
  if (dirPath !== null) return dirPath;
  dirPath = undefined;
  const uid = typeof process.getuid === 'function' ? process.getuid() : userInfo().uid;
  const p = `/dev/shm/rtjob-${uid}`;
  try {
    mkdirSync(p, { mode: 0o700, recursive: true });
    const st = lstatSync(p);
    if (!st.isDirectory() || st.uid !== uid || (st.mode & 0o077) !== 0) {
      log.warn(`${p} is not a private directory of this user; objects go over sockets`);
      return dirPath;
    }
    dirPath = p;
    sweep(p);
  } catch (e) {
    log.warn(`cannot use ${p} (${(e as Error).message}); objects go over sockets`);
  }
  return dirPath;
}

/** Removes files left by processes that are gone (named `<pid>-...`). */
function sweep(p: string): void {
  for (const name of readdirSync(p)) {
    const pid = Number(name.slice(0, name.indexOf('-')));
    if (!Number.isInteger(pid) || pid <= 0 || pidAlive(pid)) continue;
    try {
      unlinkSync(join(p, name));
    } catch {
      // Another process swept it first.
    }
  }
}

const own = new Set<string>();
let exitHook = false;
function track(path: string): void {
  own.add(path);
  if (exitHook) return;
  exitHook = true;
  process.on('exit', () => {
    for (const f of own) {
      try {
        unlinkSync(f);
      } catch {
        // Already gone.
      }
    }
  });
}

const validName = /^[0-9]+-[A-Za-z0-9_]+$/;
let seq = 0;

/** Bytes of large typed arrays in `v` (a typed array, or plain objects and arrays of them). */
export function largeBytes(v: unknown, depth = 0): number {
  if (v === null || typeof v !== 'object') return 0;
  if (ArrayBuffer.isView(v)) return v.byteLength >= segmentMinBytes && !(v instanceof DataView) ? v.byteLength : 0;
  if (depth > 4) return 0;
  let n = 0;
  if (Array.isArray(v)) {
    for (const x of v) n += largeBytes(x, depth + 1);
    return n;
  }
  const proto = Object.getPrototypeOf(v);
  if (proto !== Object.prototype && proto !== null) return 0;
  for (const k in v) n += largeBytes((v as Record<string, unknown>)[k], depth + 1);
  return n;
}

/**
 * Writes `value` to a new shared-memory file named after `id`; resolves with its wire form, or
 * undefined when shared memory is unavailable. The caller removes it with `removeShm`.
 */
export async function writeShm(value: unknown, id: string, oneShot: boolean): Promise<ShmValue | undefined> {
  const d = dir();
  if (!d) return undefined;
  const name = `${process.pid}-${id.replace(/[^A-Za-z0-9_]/g, '_')}${oneShot ? `_${seq++}` : ''}`;
  const segments: Uint8Array[] = [];
  const offsets: number[] = [];
  let end = 0;
  const swap = (v: unknown, depth: number): unknown => {
    if (v === null || typeof v !== 'object') return v;
    if (ArrayBuffer.isView(v) && !(v instanceof DataView)) {
      if (v.byteLength < segmentMinBytes) return v;
      const kind = Buffer.isBuffer(v) ? bufferKind : kinds.findIndex((C) => v instanceof C);
      if (kind < 0) return v;
      segments.push(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
      offsets.push(end);
      const seg = new Segment(kind, end, (v as unknown as { length: number }).length);
      end += Math.ceil(v.byteLength / align) * align;
      return seg;
    }
    if (depth > 4) return v;
    if (Array.isArray(v)) return v.map((x) => swap(x, depth + 1));
    const proto = Object.getPrototypeOf(v);
    if (proto !== Object.prototype && proto !== null) return v;
    const out: Record<string, unknown> = {};
    for (const k in v) out[k] = swap((v as Record<string, unknown>)[k], depth + 1);
    return out;
  };
  const skeleton = pack(swap(value, 0));
  const head = Buffer.alloc(8);
  head.writeUInt32LE(MAGIC, 0);
  head.writeUInt32LE(skeleton.length, 4);
  const base = Math.ceil((8 + skeleton.length) / align) * align;
  // Offsets were counted from the first segment; the skeleton holds them relative to `base`.
  const parts: Uint8Array[] = [head, skeleton, new Uint8Array(base - 8 - skeleton.length)];
  for (let i = 0; i < segments.length; i++) {
    const s = segments[i]!;
    parts.push(s);
    const pad = Math.ceil(s.byteLength / align) * align - s.byteLength;
    if (pad) parts.push(new Uint8Array(pad));
  }
  const path = join(d, name);
  const fh = await open(path, 'wx', 0o600);
  track(path);
  try {
    await writeAll(fh, parts);
  } catch (e) {
    await fh.close().catch(() => {});
    await removeShm(name);
    throw e;
  }
  await fh.close();
  return new ShmValue(name, base + end, oneShot);
}

/** Writes `parts` back to back from position 0: `writev` in batches, finishing short writes. */
async function writeAll(fh: FileHandle, parts: Uint8Array[]): Promise<void> {
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

/** Reads a shared-memory value (removing the file when it is a one-shot). */
export async function readShm(v: ShmValue): Promise<unknown> {
  const d = dir();
  if (!d || !validName.test(v.name)) throw new Error(`not a shared-memory object name: '${v.name.slice(0, 80)}'`);
  const path = join(d, v.name);
  const fh = await open(path, 'r');
  let file: Buffer;
  try {
    const size = (await fh.stat()).size;
    file = Buffer.allocUnsafeSlow(size);
    let got = 0;
    while (got < size) {
      const r = await fh.read(file, got, size - got, got);
      if (r.bytesRead === 0) break;
      got += r.bytesRead;
    }
    if (got !== size || size !== v.bytes) throw new Error(`shared-memory object ${v.name} is truncated`);
  } finally {
    await fh.close();
    if (v.oneShot) await unlink(path).catch(() => {});
  }
  if (file.readUInt32LE(0) !== MAGIC) throw new Error(`shared-memory object ${v.name} is malformed`);
  const len = file.readUInt32LE(4);
  const base = Math.ceil((8 + len) / align) * align;
  decoding = file.subarray(base);
  try {
    return unpack(file.subarray(8, 8 + len));
  } finally {
    decoding = undefined;
  }
}

/** Removes a file this process wrote. */
export async function removeShm(name: string): Promise<void> {
  const d = dir();
  if (!d) return;
  const path = join(d, name);
  own.delete(path);
  await unlink(path).catch(() => {});
}
