/**
 * safetensors read/write. Layout: u64 little-endian header length, a JSON header
 * `{name: {dtype, shape, data_offsets: [begin, end]}, __metadata__?}`, then the raw bytes.
 * Reads F32, F16 and BF16 (converted to float32); writes F32. Corrupt or truncated files are
 * rejected with a `SafetensorsError` that says what is wrong.
 *
 * @module
 */
import { RtjobError } from '../../runtime/errors.ts';
import type { NamedTensors } from '../engines/types.ts';

/** Thrown for a file that is not valid safetensors. */
export class SafetensorsError extends RtjobError<'SAFETENSORS_INVALID'> {
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

/**
 * Parses a safetensors buffer into float32 tensors.
 *
 * @throws SafetensorsError on a truncated file, a bad header, an unsupported dtype, or offsets
 *   that do not tile the data section
 */
export function parseSafetensors(buf: Uint8Array, source = 'safetensors'): { tensors: NamedTensors; metadata: Record<string, string> } {
  const fail = (why: string): never => {
    throw new SafetensorsError(`${source}: ${why}`);
  };
  if (buf.byteLength < 8) fail(`file is ${buf.byteLength} bytes, shorter than the 8-byte header length (truncated?)`);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const headerLen = Number(view.getBigUint64(0, true));
  if (headerLen > maxHeaderBytes) fail(`header length ${headerLen} is implausible (corrupt file?)`);
  if (8 + headerLen > buf.byteLength) fail(`header says ${headerLen} bytes but the file has ${buf.byteLength - 8} after the length (truncated)`);
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(buf.subarray(8, 8 + headerLen)));
  } catch (e) {
    return fail(`header is not valid JSON (${(e as Error).message})`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) fail('header is not a JSON object');
  const dataStart = 8 + headerLen;
  const dataLen = buf.byteLength - dataStart;
  const tensors: NamedTensors = {};
  const spans: [number, number, string][] = [];
  let metadata: Record<string, string> = {};
  for (const [name, info] of Object.entries(header)) {
    if (name === '__metadata__') {
      metadata = (info ?? {}) as Record<string, string>;
      continue;
    }
    const t = info as { dtype?: string; shape?: number[]; data_offsets?: [number, number] };
    const size = dtypeBytes[t.dtype ?? ''];
    if (!size) fail(`tensor '${name}' has dtype '${t.dtype}'; only F32, F16 and BF16 are supported`);
    if (!Array.isArray(t.shape) || t.shape.some((d) => !Number.isInteger(d) || d < 0)) fail(`tensor '${name}' has a bad shape`);
    const off = t.data_offsets;
    if (!Array.isArray(off) || off.length !== 2 || !Number.isInteger(off[0]) || !Number.isInteger(off[1]) || off[0] > off[1]) {
      fail(`tensor '${name}' has bad data_offsets`);
    }
    const [begin, end] = off as [number, number];
    const numel = (t.shape as number[]).reduce((a, b) => a * b, 1);
    if (end - begin !== numel * size!) fail(`tensor '${name}': ${end - begin} bytes for ${numel} elements of ${t.dtype}`);
    if (end > dataLen) fail(`tensor '${name}' ends at byte ${end} but the data section has ${dataLen} (truncated)`);
    spans.push([begin, end, name]);
    const bytes = buf.subarray(dataStart + begin, dataStart + end);
    const data = new Float32Array(numel);
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (t.dtype === 'F32') for (let i = 0; i < numel; i++) data[i] = dv.getFloat32(i * 4, true);
    else if (t.dtype === 'BF16') {
      const u32 = new Uint32Array(data.buffer);
      for (let i = 0; i < numel; i++) u32[i] = dv.getUint16(i * 2, true) << 16;
    } else for (let i = 0; i < numel; i++) data[i] = f16ToF32(dv.getUint16(i * 2, true));
    tensors[name] = { shape: [...(t.shape as number[])], data };
  }
  spans.sort((a, b) => a[0] - b[0]);
  let pos = 0;
  for (const [begin, end, name] of spans) {
    if (begin !== pos) fail(`tensor '${name}' starts at ${begin}, expected ${pos} (overlapping or holes in the data)`);
    pos = end;
  }
  if (pos !== dataLen) fail(`data section has ${dataLen} bytes but tensors cover ${pos}`);
  return { tensors, metadata };
}

/** Serialises float32 tensors as safetensors F32 (header padded to 8 bytes). */
export function serializeSafetensors(tensors: NamedTensors, metadata: Record<string, string> = { format: 'pt' }): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  const names = Object.keys(tensors);
  for (const name of names) {
    const t = tensors[name]!;
    const numel = t.shape.reduce((a, b) => a * b, 1);
    if (numel !== t.data.length) throw new Error(`tensor '${name}': shape ${t.shape} does not match ${t.data.length} values`);
    header[name] = { dtype: 'F32', shape: t.shape, data_offsets: [offset, offset + numel * 4] };
    offset += numel * 4;
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
    out.set(new Uint8Array(d.buffer, d.byteOffset, d.byteLength), p);
    p += d.byteLength;
  }
  return out;
}
