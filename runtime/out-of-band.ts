/**
 * Values with their large typed arrays out of band: a small skeleton (the value packed with the
 * ordinary codec, each typed array of ≥ 64 KiB replaced by a segment marker) followed by each
 * array's raw bytes at a 64-byte aligned offset. Encoding copies no array: the parts are the
 * arrays' own memory, for a writer to hand to `writev` or a socket. Decoding a buffer the caller
 * owns copies nothing either: the arrays come back as views into it.
 *
 * Shared-memory transfers (`client/shm.ts`) write their files in this layout, and the transport
 * sends messages with large arrays in it (`packOutOfBand`): one copy of each array on the way out
 * (msgpack would copy them into a growing buffer, and decode them into copies again).
 *
 * Layout: `'RTS1'`, the skeleton's length (u32 LE), the skeleton, padding to 64, the arrays.
 *
 * @module
 */
import { pack, registerWireClass, unpack } from './protocol.ts';
import { ProtocolError } from './errors.ts';

/** Typed arrays smaller than this stay inside the skeleton. */
const segmentMinBytes = 64 << 10;
const align = 64;
const MAGIC = 0x31535452; // 'RTS1'

/** A large typed array inside a skeleton: where its bytes lie, from the first array's offset. */
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

/** The buffer being decoded (extension readers have no context argument; decoding is synchronous). */
let decoding: Buffer | undefined;

let registered = false;
/** Registers the segment marker with the codec; called once per process. */
export function installOutOfBandCodec(): void {
  if (registered) return;
  registered = true;
  registerWireClass<Segment, [number, number, number]>({
    type: 4,
    Class: Segment,
    write: (s) => [s.kind, s.offset, s.length],
    read: ([kind, offset, length]) => viewOf(kind, offset, length) as Segment,
  });
}

function viewOf(kind: number, offset: number, length: number): unknown {
  const file = decoding;
  if (!file) throw new ProtocolError('an out-of-band segment outside an out-of-band value');
  const C = kind === bufferKind ? Uint8Array : kinds[kind];
  if (!C || offset < 0 || offset + length * C.BYTES_PER_ELEMENT > file.length) {
    throw new ProtocolError('malformed out-of-band segment');
  }
  const at = file.byteOffset + offset;
  if (kind === bufferKind) return Buffer.from(file.buffer, at, length);
  if (at % C.BYTES_PER_ELEMENT === 0) return new C(file.buffer as ArrayBuffer, at, length);
  return new C(file.buffer.slice(at, at + length * C.BYTES_PER_ELEMENT) as ArrayBuffer);
}

/**
 * A reply value whose typed arrays stay unchanged until it has been sent: an object served from
 * an object store (immutable once put, as in Ray). The transport writes its arrays to the socket
 * from their own memory instead of copying them into a send buffer first; other values are
 * copied at send, so the sender may change them at once.
 */
export class Immutable {
  constructor(readonly value: unknown) {}
}

/** Bytes of large typed arrays in `v` (a typed array, or plain objects and arrays of them). */
export function largeBytes(v: unknown, depth = 0): number {
  if (v === null || typeof v !== 'object') return 0;
  if (ArrayBuffer.isView(v))
    return v.byteLength >= segmentMinBytes && !(v instanceof DataView) ? v.byteLength : 0;
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

/** `value` as parts to write back to back (`total` bytes in all); no array is copied. */
export function encodeOutOfBand(value: unknown): { parts: Uint8Array[]; total: number } {
  const segments: Uint8Array[] = [];
  let end = 0;
  const swap = (v: unknown, depth: number): unknown => {
    if (v === null || typeof v !== 'object') return v;
    if (ArrayBuffer.isView(v) && !(v instanceof DataView)) {
      if (v.byteLength < segmentMinBytes) return v;
      const kind = Buffer.isBuffer(v) ? bufferKind : kinds.findIndex((C) => v instanceof C);
      if (kind < 0) return v;
      segments.push(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
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
  // Segment offsets count from `base`, where the first array starts.
  const parts: Uint8Array[] = [head, skeleton, new Uint8Array(base - 8 - skeleton.length)];
  for (const s of segments) {
    parts.push(s);
    const pad = Math.ceil(s.byteLength / align) * align - s.byteLength;
    if (pad) parts.push(new Uint8Array(pad));
  }
  return { parts, total: base + end };
}

/**
 * `value` in the out-of-band layout as one buffer: each array copied once, so the sender may
 * change its arrays as soon as this returns. `alloc` gives the buffer (the transport reuses one).
 */
export function packOutOfBand(
  value: unknown,
  alloc: (bytes: number) => Buffer = Buffer.allocUnsafeSlow,
): Buffer {
  const { parts, total } = encodeOutOfBand(value);
  const out = alloc(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/** Whether `bytes` starts like an out-of-band value (a msgpack message never does). */
export function isOutOfBand(bytes: Uint8Array): boolean {
  // 'RTS1': a msgpack message is a map, whose first byte is never 'R'.
  return (
    bytes.length >= 8 &&
    bytes[0] === 0x52 &&
    bytes[1] === 0x54 &&
    bytes[2] === 0x53 &&
    bytes[3] === 0x31
  );
}

/**
 * The value in `bytes`, which the caller hands over: its arrays are views into it. Throws on
 * malformed input.
 */
export function decodeOutOfBand(bytes: Buffer): unknown {
  if (bytes.length < 8 || bytes.readUInt32LE(0) !== MAGIC)
    throw new ProtocolError('not an out-of-band value');
  const len = bytes.readUInt32LE(4);
  if (8 + len > bytes.length) throw new ProtocolError('out-of-band value is truncated');
  const base = Math.ceil((8 + len) / align) * align;
  decoding = bytes.subarray(Math.min(base, bytes.length));
  try {
    return unpack(bytes.subarray(8, 8 + len));
  } finally {
    decoding = undefined;
  }
}
