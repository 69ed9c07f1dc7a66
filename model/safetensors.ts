/**
 * safetensors read/write. Layout: u64 little-endian header length, a JSON header
 * `{name: {dtype, shape, data_offsets: [begin, end]}, __metadata__?}`, then the raw bytes.
 * Reads F32, F16 and BF16 (converted to float32); writes F32 or BF16. Corrupt or truncated files are
 * rejected with a `SafetensorsError` that says what is wrong.
 *
 * @module
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { RtjobError } from '../runtime/errors.ts';
import type { NamedTensors } from './tensors.ts';
import { ModelError } from './errors.ts';

/** Thrown for a file that is not valid safetensors. */
export class SafetensorsError extends RtjobError<'SAFETENSORS_INVALID'> {
  override get name(): string {
    return 'SafetensorsError';
  }

  constructor(message: string) {
    super('SAFETENSORS_INVALID', message);
  }
}

const maxHeaderBytes = 100 * 1024 * 1024;
const dtypeBytes: Record<string, number> = { F32: 4, F16: 2, BF16: 2 };

function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

interface HeaderEntry {
  name: string;
  dtype: string;
  shape: number[];
  begin: number;
  end: number;
}

/**
 * Validates a header against the data section's length: known dtypes, sane shapes, and offsets
 * that tile the data exactly (no overlaps, holes or overruns).
 */
function parseHeader(
  headerBytes: Uint8Array,
  dataLen: number,
  fail: (why: string) => never,
): { entries: HeaderEntry[]; metadata: Record<string, string> } {
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(headerBytes));
  } catch (e) {
    return fail(`header is not valid JSON (${(e as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header))
    fail('header is not a JSON object');
  const entries: HeaderEntry[] = [];
  let metadata: Record<string, string> = {};
  for (const [name, info] of Object.entries(header)) {
    if (name === '__metadata__') {
      metadata = (info ?? {}) as Record<string, string>;
      continue;
    }
    const t = info as { dtype?: string; shape?: number[]; data_offsets?: [number, number] };
    const size = dtypeBytes[t.dtype ?? ''];
    if (!size)
      fail(`tensor '${name}' has dtype '${t.dtype}'; only F32, F16 and BF16 are supported`);
    if (!Array.isArray(t.shape) || t.shape.some((d) => !Number.isInteger(d) || d < 0))
      fail(`tensor '${name}' has a bad shape`);
    const off = t.data_offsets;
    if (
      !Array.isArray(off) ||
      off.length !== 2 ||
      !Number.isInteger(off[0]) ||
      !Number.isInteger(off[1]) ||
      off[0] > off[1]
    ) {
      fail(`tensor '${name}' has bad data_offsets`);
    }
    const [begin, end] = off as [number, number];
    const numel = (t.shape as number[]).reduce((a, b) => a * b, 1);
    if (end - begin !== numel * size!)
      fail(`tensor '${name}': ${end - begin} bytes for ${numel} elements of ${t.dtype}`);
    if (end > dataLen)
      fail(`tensor '${name}' ends at byte ${end} but the data section has ${dataLen} (truncated)`);
    entries.push({ name, dtype: t.dtype!, shape: [...(t.shape as number[])], begin, end });
  }
  const spans = [...entries].sort((a, b) => a.begin - b.begin);
  let pos = 0;
  for (const e of spans) {
    if (e.begin !== pos)
      fail(
        `tensor '${e.name}' starts at ${e.begin}, expected ${pos} (overlapping or holes in the data)`,
      );
    pos = e.end;
  }
  if (pos !== dataLen) fail(`data section has ${dataLen} bytes but tensors cover ${pos}`);
  return { entries, metadata };
}

/** One tensor's raw bytes as float32. */
function decodeTensor(bytes: Uint8Array, dtype: string, numel: number): Float32Array {
  const data = new Float32Array(numel);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === 'F32') for (let i = 0; i < numel; i++) data[i] = dv.getFloat32(i * 4, true);
  else if (dtype === 'BF16') {
    const u32 = new Uint32Array(data.buffer);
    for (let i = 0; i < numel; i++) u32[i] = dv.getUint16(i * 2, true) << 16;
  } else for (let i = 0; i < numel; i++) data[i] = f16ToF32(dv.getUint16(i * 2, true));
  return data;
}

/** The header length from the first 8 bytes, checked against the file size. */
function headerLength(first8: Uint8Array, fileLen: number, fail: (why: string) => never): number {
  if (fileLen < 8)
    fail(`file is ${fileLen} bytes, shorter than the 8-byte header length (truncated?)`);
  const headerLen = Number(new DataView(first8.buffer, first8.byteOffset, 8).getBigUint64(0, true));
  if (headerLen > maxHeaderBytes) fail(`header length ${headerLen} is implausible (corrupt file?)`);
  if (8 + headerLen > fileLen)
    fail(
      `header says ${headerLen} bytes but the file has ${fileLen - 8} after the length (truncated)`,
    );
  return headerLen;
}

const failer =
  (source: string) =>
  (why: string): never => {
    throw new SafetensorsError(`${source}: ${why}`);
  };

/**
 * Parses a safetensors buffer into float32 tensors.
 *
 * @throws SafetensorsError on a truncated file, a bad header, an unsupported dtype, or offsets
 *   that do not tile the data section
 */
export function parseSafetensors(
  buf: Uint8Array,
  source = 'safetensors',
): { tensors: NamedTensors; metadata: Record<string, string> } {
  const fail = failer(source);
  const headerLen = headerLength(buf.subarray(0, 8), buf.byteLength, fail);
  const dataStart = 8 + headerLen;
  const { entries, metadata } = parseHeader(
    buf.subarray(8, dataStart),
    buf.byteLength - dataStart,
    fail,
  );
  const tensors: NamedTensors = {};
  for (const e of entries) {
    const numel = e.shape.reduce((a, b) => a * b, 1);
    tensors[e.name] = {
      shape: e.shape,
      data: decodeTensor(buf.subarray(dataStart + e.begin, dataStart + e.end), e.dtype, numel),
    };
  }
  return { tensors, metadata };
}

/**
 * Reads a safetensors file tensor by tensor (never the whole file at once: files over 2 GiB are
 * beyond `readFileSync`, and peak memory stays at the float32 result plus one tensor's bytes).
 *
 * @throws SafetensorsError as {@link parseSafetensors}
 */
export function readSafetensorsFile(path: string): {
  tensors: NamedTensors;
  metadata: Record<string, string>;
} {
  const fail = failer(path);
  const fd = openSync(path, 'r');
  try {
    const fileLen = fstatSync(fd).size;
    const readAt = (pos: number, len: number): Uint8Array => {
      const b = Buffer.allocUnsafe(len);
      let got = 0;
      while (got < len) {
        const n = readSync(fd, b, got, len - got, pos + got);
        if (n === 0) fail(`unexpected end of file at byte ${pos + got}`);
        got += n;
      }
      return b;
    };
    const headerLen = headerLength(readAt(0, Math.min(8, fileLen)), fileLen, fail);
    const dataStart = 8 + headerLen;
    const { entries, metadata } = parseHeader(readAt(8, headerLen), fileLen - dataStart, fail);
    const tensors: NamedTensors = {};
    for (const e of entries) {
      const numel = e.shape.reduce((a, b) => a * b, 1);
      tensors[e.name] = {
        shape: e.shape,
        data: decodeTensor(readAt(dataStart + e.begin, e.end - e.begin), e.dtype, numel),
      };
    }
    return { tensors, metadata };
  } finally {
    closeSync(fd);
  }
}

/** Rounds float32 values to bfloat16 bit patterns (round to nearest even; NaN stays NaN). */
export function toBf16(data: Float32Array): Uint16Array {
  const u32 = new Uint32Array(data.buffer, data.byteOffset, data.length);
  const out = new Uint16Array(data.length);
  for (let i = 0; i < data.length; i++) {
    const u = u32[i]!;
    if ((u & 0x7fffffff) > 0x7f800000) out[i] = (u >>> 16) | 0x40;
    else out[i] = (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
  }
  return out;
}

/**
 * Serialises float32 tensors as safetensors (header padded to 8 bytes), in F32 or, rounded to
 * nearest even, BF16.
 */
export function serializeSafetensors(
  tensors: NamedTensors,
  metadata: Record<string, string> = { format: 'pt' },
  dtype: 'F32' | 'BF16' = 'F32',
): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: metadata };
  const size = dtypeBytes[dtype]!;
  let offset = 0;
  const names = Object.keys(tensors);
  for (const name of names) {
    const t = tensors[name]!;
    const numel = t.shape.reduce((a, b) => a * b, 1);
    if (numel !== t.data.length)
      throw new ModelError(
        'MODEL_CHECKPOINT',
        `tensor '${name}': shape ${t.shape} does not match ${t.data.length} values`,
      );
    header[name] = { dtype, shape: t.shape, data_offsets: [offset, offset + numel * size] };
    offset += numel * size;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8);
  const hb = Buffer.from(json, 'utf8');
  const out = new Uint8Array(8 + hb.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(hb.length), true);
  out.set(hb, 8);
  let p = 8 + hb.length;
  for (const name of names) {
    const d = tensors[name]!.data;
    const bytes =
      dtype === 'BF16'
        ? new Uint8Array(toBf16(d).buffer)
        : new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
    out.set(bytes, p);
    p += bytes.byteLength;
  }
  return out;
}
