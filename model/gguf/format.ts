/**
 * The GGUF file format (version 3), as llama.cpp reads it: a header (`GGUF`, version, tensor and
 * key counts), typed metadata key/values, tensor descriptions (name, dims innermost first, ggml
 * type, offset into the data section), then the tensor data, each tensor aligned to 32 bytes.
 * This module encodes; it knows nothing of model families (see `convert.ts`).
 *
 * @module
 */
import { toBf16 } from '../safetensors.ts';
import { RtjobError } from '../../runtime/errors.ts';

/** A model this writer cannot express as GGUF, or a GGUF it cannot use. */
export class GgufError extends RtjobError<'GGUF_UNSUPPORTED'> {
  override get name(): string {
    return 'GgufError';
  }
  constructor(message: string) {
    super('GGUF_UNSUPPORTED', message);
  }
}

/** The element types this writer produces, by GGUF name. */
export const ggufDtypes = ['f32', 'f16', 'bf16', 'q8_0'] as const;
export type GgufDtype = (typeof ggufDtypes)[number];

/** ggml type ids (`enum ggml_type`). */
export const ggmlTypeId: Record<GgufDtype, number> = { f32: 0, f16: 1, q8_0: 8, bf16: 30 };

/** Q8_0: blocks of 32 values, each an f16 scale followed by 32 int8. */
const q8Block = 32;
const q8BlockBytes = 2 + q8Block;

/** The file's alignment of tensor data (llama.cpp's default, `general.alignment`). */
export const ggufAlignment = 32;

/** One metadata value, tagged with its GGUF type. */
export type GgufValue =
  | { type: 'u32'; value: number }
  | { type: 'i32'; value: number }
  | { type: 'f32'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'str'; value: string }
  | { type: 'str[]'; value: string[] }
  | { type: 'i32[]'; value: ArrayLike<number> };

const valueType = { u32: 4, i32: 5, f32: 6, bool: 7, str: 8, arr: 9 } as const;

/** Bytes a tensor of `count` elements takes in `dtype`. */
export function ggufTensorBytes(dtype: GgufDtype, count: number): number {
  if (dtype === 'q8_0') return (count / q8Block) * q8BlockBytes;
  return count * (dtype === 'f32' ? 4 : 2);
}

/** Rounds float32 values to IEEE half-precision bit patterns (round to nearest even). */
export function toF16(data: Float32Array): Uint16Array {
  const out = new Uint16Array(data.length);
  for (let i = 0; i < data.length; i++) out[i] = f32ToF16(data[i]!);
  return out;
}

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

function f32ToF16(x: number): number {
  f32Scratch[0] = x;
  const u = u32Scratch[0]!;
  const sign = (u >>> 16) & 0x8000;
  const exp = (u >>> 23) & 0xff;
  let mant = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    // Subnormal half (or zero): shift the implicit bit in, round to nearest even.
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = mant & ((1 << shift) - 1);
    let h = mant >>> shift;
    if (rest > half || (rest === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && h & 1)) h++;
  return sign | h;
}

/**
 * Quantises rows of 32-aligned length to Q8_0 as ggml's reference quantiser does
 * (`quantize_row_q8_0_ref`): per block of 32, d = max|x| / 127 stored as f16, q = roundf(x / d)
 * computed as x · (1/d) in float32. Typed views instead of a DataView per element: a weight sync
 * quantises the whole model (596M values at the Qwen3-0.6B shape).
 */
export function toQ8_0(data: Float32Array): Uint8Array {
  if (data.length % q8Block) throw new GgufError(`q8_0 needs a multiple of ${q8Block} values`);
  const blocks = data.length / q8Block;
  const out = new Uint8Array(blocks * q8BlockBytes);
  const quants = new Int8Array(out.buffer);
  for (let b = 0, at = 0; b < blocks; b++, at += q8BlockBytes) {
    const base = b * q8Block;
    let amax = 0;
    for (let j = 0; j < q8Block; j++) {
      const a = Math.abs(data[base + j]!);
      if (a > amax) amax = a;
    }
    const d = Math.fround(amax / 127);
    const id = d ? Math.fround(1 / d) : 0;
    const h = f32ToF16(d);
    out[at] = h & 0xff;
    out[at + 1] = h >>> 8;
    for (let j = 0; j < q8Block; j++) {
      const x = Math.fround(data[base + j]! * id);
      // roundf: half away from zero (|x| ≤ 127, so x ± 0.5 is exact).
      quants[at + 2 + j] = x >= 0 ? Math.floor(x + 0.5) : -Math.floor(0.5 - x);
    }
  }
  return out;
}

/** Encodes float32 values as `dtype` tensor bytes. */
export function encodeTensor(dtype: GgufDtype, data: Float32Array): Uint8Array {
  switch (dtype) {
    case 'f32':
      return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    case 'f16': {
      const h = toF16(data);
      return new Uint8Array(h.buffer);
    }
    case 'bf16': {
      const h = toBf16(data);
      return new Uint8Array(h.buffer);
    }
    case 'q8_0':
      return toQ8_0(data);
  }
}

/** A tensor as the header describes it; `offset` is relative to the data section. */
export interface GgufTensorInfo {
  name: string;
  /** HF-order shape (outermost first); written reversed, as ggml's `ne`. */
  shape: number[];
  dtype: GgufDtype;
  offset: number;
  bytes: number;
}

/** Growable little-endian byte writer for the header. */
class Bytes {
  private buf = Buffer.alloc(1 << 16);
  length = 0;
  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const next = Buffer.alloc(Math.max(this.buf.length * 2, this.length + n));
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }
  u32(v: number): void {
    this.room(4);
    this.buf.writeUInt32LE(v, this.length);
    this.length += 4;
  }
  i32(v: number): void {
    this.room(4);
    this.buf.writeInt32LE(v, this.length);
    this.length += 4;
  }
  u64(v: number): void {
    this.room(8);
    this.buf.writeBigUInt64LE(BigInt(v), this.length);
    this.length += 8;
  }
  f32(v: number): void {
    this.room(4);
    this.buf.writeFloatLE(v, this.length);
    this.length += 4;
  }
  u8(v: number): void {
    this.room(1);
    this.buf.writeUInt8(v, this.length);
    this.length += 1;
  }
  str(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.room(b.length);
    b.copy(this.buf, this.length);
    this.length += b.length;
  }
  pad(align: number): void {
    const n = (align - (this.length % align)) % align;
    this.room(n);
    this.buf.fill(0, this.length, this.length + n);
    this.length += n;
  }
  bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

function writeValue(b: Bytes, v: GgufValue): void {
  switch (v.type) {
    case 'u32':
      b.u32(valueType.u32);
      b.u32(v.value);
      return;
    case 'i32':
      b.u32(valueType.i32);
      b.i32(v.value);
      return;
    case 'f32':
      b.u32(valueType.f32);
      b.f32(v.value);
      return;
    case 'bool':
      b.u32(valueType.bool);
      b.u8(v.value ? 1 : 0);
      return;
    case 'str':
      b.u32(valueType.str);
      b.str(v.value);
      return;
    case 'str[]':
      b.u32(valueType.arr);
      b.u32(valueType.str);
      b.u64(v.value.length);
      for (const s of v.value) b.str(s);
      return;
    case 'i32[]':
      b.u32(valueType.arr);
      b.u32(valueType.i32);
      b.u64(v.value.length);
      for (let i = 0; i < v.value.length; i++) b.i32(v.value[i]!);
      return;
  }
}

/**
 * Lays out the tensors (each at an aligned offset of the data section) and encodes the header:
 * everything before the data section, padded to the alignment.
 *
 * @returns the header bytes and the tensors with their offsets filled in
 */
export function encodeGgufHeader(
  metadata: [string, GgufValue][],
  tensors: Omit<GgufTensorInfo, 'offset' | 'bytes'>[],
): { header: Buffer; tensors: GgufTensorInfo[] } {
  const b = new Bytes();
  b.u32(0x46554747); // "GGUF" read as a little-endian u32
  b.u32(3);
  b.u64(tensors.length);
  b.u64(metadata.length);
  for (const [k, v] of metadata) {
    b.str(k);
    writeValue(b, v);
  }
  let offset = 0;
  const laid: GgufTensorInfo[] = [];
  for (const t of tensors) {
    const count = t.shape.reduce((a, x) => a * x, 1);
    const bytes = ggufTensorBytes(t.dtype, count);
    b.str(t.name);
    b.u32(t.shape.length);
    for (const d of [...t.shape].reverse()) b.u64(d);
    b.u32(ggmlTypeId[t.dtype]);
    b.u64(offset);
    laid.push({ ...t, offset, bytes });
    offset += bytes + ((ggufAlignment - (bytes % ggufAlignment)) % ggufAlignment);
  }
  b.pad(ggufAlignment);
  return { header: b.bytes(), tensors: laid };
}
