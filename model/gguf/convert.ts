/**
 * HF checkpoint → GGUF for llama.cpp: Llama (and Mistral, which llama.cpp runs as `llama`), Qwen2
 * and Qwen3, in f32, f16, bf16 or q8_0. Tensors are renamed to llama.cpp's names; the q/k rows of
 * Llama are permuted from HF's rotate-half RoPE layout to the interleaved pairs llama.cpp's `llama`
 * architecture rotates (Qwen2/3 use NEOX RoPE, HF's layout, so they are kept); Llama 3 RoPE
 * scaling is carried as the `rope_freqs` tensor, linear scaling as `rope.scaling.*` keys.
 *
 * The returned {@link GgufLayout} says where every HF tensor's bytes are, so new weights can be
 * written into the same file in place ({@link rewriteGgufTensors}); llama.cpp maps the file
 * shared, so a loaded CPU model computes with them at once.
 *
 * ```sh
 * node --import tsx model/gguf/convert.ts <hf-dir> <out.gguf> [f32|f16|bf16|q8_0]
 * ```
 *
 * @module
 */
import { closeSync, openSync, readSync, writeSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { readConfig, readWeights } from '../checkpoint.ts';
import { parameterShapes, ropeInvFreq, type LlamaConfig } from '../config.ts';
import type { NamedTensors } from '../tensors.ts';
import {
  encodeGgufHeader,
  encodeTensor,
  GgufError,
  ggufDtypes,
  type GgufDtype,
  type GgufTensorInfo,
  type GgufValue,
} from './format.ts';
import { tokenizerMetadata } from './tokenizer.ts';

/** Where one HF tensor lives in a written GGUF and how its values are transformed there. */
export interface GgufPlacement {
  hfName: string;
  info: GgufTensorInfo;
  /** Llama q/k: permute rows per head from rotate-half to interleaved, with this many heads. */
  permuteHeads?: number;
}

/** A written GGUF: its path, where its data section starts, and each HF tensor's place. */
export interface GgufLayout {
  path: string;
  dtype: GgufDtype;
  dataStart: number;
  tensors: Map<string, GgufPlacement>;
}

/** Options of {@link writeGguf}. */
export interface GgufWriteOptions {
  /** Element type of the matrices (norms, biases and 32-unaligned matrices stay f32). @default 'f32' */
  dtype?: GgufDtype;
  /** HF tokenizer files to carry (tokenizer.json, tokenizer_config.json, chat_template.jinja). */
  tokenizerDir?: string;
  /** `general.name`. @default 'rtjob' */
  name?: string;
}

/** llama.cpp's architecture name for each HF family (`general.architecture`). */
export function ggufArch(c: LlamaConfig): 'llama' | 'qwen2' | 'qwen3' {
  if (c.model_type === 'llama' || c.model_type === 'mistral') return 'llama';
  if (c.model_type === 'qwen3' && (c.qkv_bias || c.o_bias)) {
    throw new GgufError(
      "llama.cpp's qwen3 architecture has no attention biases (attention_bias: true)",
    );
  }
  if (c.model_type === 'qwen2' && c.o_bias) throw new GgufError('qwen2 with an o_proj bias');
  return c.model_type;
}

const layerNames: Record<string, string> = {
  'input_layernorm.weight': 'attn_norm.weight',
  'self_attn.q_proj.weight': 'attn_q.weight',
  'self_attn.k_proj.weight': 'attn_k.weight',
  'self_attn.v_proj.weight': 'attn_v.weight',
  'self_attn.q_proj.bias': 'attn_q.bias',
  'self_attn.k_proj.bias': 'attn_k.bias',
  'self_attn.v_proj.bias': 'attn_v.bias',
  'self_attn.o_proj.weight': 'attn_output.weight',
  'self_attn.o_proj.bias': 'attn_output.bias',
  'self_attn.q_norm.weight': 'attn_q_norm.weight',
  'self_attn.k_norm.weight': 'attn_k_norm.weight',
  'post_attention_layernorm.weight': 'ffn_norm.weight',
  'mlp.gate_proj.weight': 'ffn_gate.weight',
  'mlp.up_proj.weight': 'ffn_up.weight',
  'mlp.down_proj.weight': 'ffn_down.weight',
};

/** llama.cpp's name of an HF tensor. */
export function ggufTensorName(hfName: string): string {
  if (hfName === 'model.embed_tokens.weight') return 'token_embd.weight';
  if (hfName === 'model.norm.weight') return 'output_norm.weight';
  if (hfName === 'lm_head.weight') return 'output.weight';
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hfName);
  const rest = m && layerNames[m[2]!];
  if (!m || !rest) throw new GgufError(`no GGUF name for tensor '${hfName}'`);
  return `blk.${m[1]}.${rest}`;
}

/**
 * Reorders each head's rows from HF's rotate-half layout (first half of the head's dims, then
 * the second) to the interleaved pairs that llama.cpp's normal RoPE rotates: row `2i + h` of a
 * head takes row `h * headDim/2 + i`.
 */
export function permuteRotary(data: Float32Array, rows: number, heads: number): Float32Array {
  const cols = data.length / rows;
  const headDim = rows / heads;
  const half = headDim / 2;
  const out = new Float32Array(data.length);
  for (let hd = 0; hd < heads; hd++) {
    for (let i = 0; i < half; i++) {
      for (let h = 0; h < 2; h++) {
        const from = (hd * headDim + h * half + i) * cols;
        const to = (hd * headDim + 2 * i + h) * cols;
        out.set(data.subarray(from, from + cols), to);
      }
    }
  }
  return out;
}

function archMetadata(
  c: LlamaConfig,
  arch: string,
  dtype: GgufDtype,
  name: string,
): [string, GgufValue][] {
  const u32 = (value: number): GgufValue => ({ type: 'u32', value });
  const out: [string, GgufValue][] = [
    ['general.architecture', { type: 'str', value: arch }],
    ['general.name', { type: 'str', value: name }],
    ['general.file_type', u32({ f32: 0, f16: 1, q8_0: 7, bf16: 32 }[dtype])],
    [`${arch}.context_length`, u32(c.max_position_embeddings)],
    [`${arch}.embedding_length`, u32(c.hidden_size)],
    [`${arch}.block_count`, u32(c.num_hidden_layers)],
    [`${arch}.feed_forward_length`, u32(c.intermediate_size)],
    [`${arch}.attention.head_count`, u32(c.num_attention_heads)],
    [`${arch}.attention.head_count_kv`, u32(c.num_key_value_heads)],
    [`${arch}.attention.key_length`, u32(c.head_dim)],
    [`${arch}.attention.value_length`, u32(c.head_dim)],
    [`${arch}.rope.dimension_count`, u32(c.head_dim)],
    [`${arch}.rope.freq_base`, { type: 'f32', value: c.rope_theta }],
    [`${arch}.attention.layer_norm_rms_epsilon`, { type: 'f32', value: c.rms_norm_eps }],
    [`${arch}.vocab_size`, u32(c.vocab_size)],
  ];
  const s = c.rope_scaling;
  if (s.rope_type === 'linear') {
    out.push([`${arch}.rope.scaling.type`, { type: 'str', value: 'linear' }]);
    out.push([`${arch}.rope.scaling.factor`, { type: 'f32', value: s.factor }]);
  } else if (s.rope_type === 'llama3' && arch !== 'llama') {
    throw new GgufError(`llama3 RoPE scaling on a ${arch} model`);
  }
  return out;
}

/** Llama 3 RoPE scaling as llama.cpp's frequency factors: base frequency / scaled frequency. */
function ropeFreqFactors(c: LlamaConfig): Float32Array {
  const base = ropeInvFreq({ ...c, rope_scaling: { rope_type: 'default' } });
  const scaled = ropeInvFreq(c);
  return base.map((f, i) => f / scaled[i]!);
}

/** Which element type a tensor gets: matrices take `dtype` where its block size allows. */
function tensorDtype(shape: number[], dtype: GgufDtype): GgufDtype {
  if (shape.length < 2) return 'f32';
  if (dtype === 'q8_0' && shape[shape.length - 1]! % 32 !== 0) return 'f32';
  return dtype;
}

/** The values a placement holds for `data` (its HF tensor): permuted when Llama's q/k. */
function ggufValues(p: GgufPlacement, data: Float32Array): Float32Array {
  return p.permuteHeads ? permuteRotary(data, p.info.shape[0]!, p.permuteHeads) : data;
}

/**
 * Writes `weights` (HF names, as `readWeights` gives them) of a `config` model to `path` as GGUF.
 *
 * @throws GgufError for what llama.cpp cannot run as this family (e.g. Qwen3 with attention bias)
 * @example
 * const layout = writeGguf('/tmp/m.gguf', readConfig(dir), readWeights(dir), { tokenizerDir: dir });
 */
export function writeGguf(
  path: string,
  config: LlamaConfig,
  weights: NamedTensors,
  opts: GgufWriteOptions = {},
): GgufLayout {
  const dtype = opts.dtype ?? 'f32';
  if (!ggufDtypes.includes(dtype))
    throw new GgufError(`GGUF dtype '${dtype}' (use ${ggufDtypes.join(', ')})`);
  const arch = ggufArch(config);
  const specs: { hfName: string; shape: number[]; permuteHeads?: number }[] = [];
  for (const [hfName, shape] of parameterShapes(config)) {
    const t = weights[hfName];
    if (!t) throw new GgufError(`tensor '${hfName}' is missing`);
    if (t.data.length !== shape.reduce((a, b) => a * b, 1))
      throw new GgufError(
        `tensor '${hfName}' has ${t.data.length} values, expected shape [${shape}]`,
      );
    let permuteHeads: number | undefined;
    if (arch === 'llama' && /self_attn\.q_proj\./.test(hfName))
      permuteHeads = config.num_attention_heads;
    if (arch === 'llama' && /self_attn\.k_proj\./.test(hfName))
      permuteHeads = config.num_key_value_heads;
    specs.push({ hfName, shape, permuteHeads });
  }
  const ropeFreqs =
    config.rope_scaling.rope_type === 'llama3' ? ropeFreqFactors(config) : undefined;
  const metadata = [
    ...archMetadata(config, arch, dtype, opts.name ?? 'rtjob'),
    ...tokenizerMetadata(config, opts.tokenizerDir),
  ];
  const infos = specs.map((s) => ({
    name: ggufTensorName(s.hfName),
    shape: s.shape,
    dtype: tensorDtype(s.shape, dtype),
  }));
  if (ropeFreqs) infos.push({ name: 'rope_freqs.weight', shape: [ropeFreqs.length], dtype: 'f32' });
  const { header, tensors } = encodeGgufHeader(metadata, infos);
  const layout: GgufLayout = { path, dtype, dataStart: header.length, tensors: new Map() };
  specs.forEach((s, i) =>
    layout.tensors.set(s.hfName, {
      hfName: s.hfName,
      info: tensors[i]!,
      permuteHeads: s.permuteHeads,
    }),
  );
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, header, 0, header.length, 0);
    for (const p of layout.tensors.values()) writePlacement(fd, layout, p, weights[p.hfName]!.data);
    if (ropeFreqs) {
      const info = tensors[tensors.length - 1]!;
      writeBytes(fd, layout.dataStart + info.offset, encodeTensor('f32', ropeFreqs));
    }
    // Pad the file to the end of the last tensor's aligned slot.
    const last = tensors[tensors.length - 1]!;
    const end = layout.dataStart + last.offset + last.bytes;
    const padded = Math.ceil(end / 32) * 32;
    if (padded > end) writeSync(fd, Buffer.alloc(padded - end), 0, padded - end, end);
  } finally {
    closeSync(fd);
  }
  return layout;
}

function writeBytes(fd: number, at: number, bytes: Uint8Array): void {
  let done = 0;
  while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done, at + done);
}

function readBytes(fd: number, at: number, length: number): Buffer {
  const out = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const n = readSync(fd, out, done, length - done, at + done);
    if (n === 0) throw new GgufError(`GGUF ended at byte ${at + done}, expected ${at + length}`);
    done += n;
  }
  return out;
}

function encodePlacement(p: GgufPlacement, data: Float32Array): Uint8Array {
  const bytes = encodeTensor(p.info.dtype, ggufValues(p, data));
  if (bytes.length !== p.info.bytes)
    throw new GgufError(`tensor '${p.hfName}': ${bytes.length} bytes, slot ${p.info.bytes}`);
  return bytes;
}

function writePlacement(
  fd: number,
  layout: GgufLayout,
  p: GgufPlacement,
  data: Float32Array,
): void {
  writeBytes(fd, layout.dataStart + p.info.offset, encodePlacement(p, data));
}

/** Options of {@link rewriteGgufTensors}. */
export interface GgufRewriteOptions {
  /**
   * Tensors (HF names) whose old bytes to compare with the new ones until one differs, so the
   * caller knows whether the rewrite changed anything it can observe. @default none
   */
  compare?: (hfName: string) => boolean;
}

/**
 * Overwrites the bytes of the given tensors (HF names, same shapes) in a GGUF written by
 * {@link writeGguf}, in place: same file, same inode, so a model that maps it sees them.
 *
 * @returns how many tensors and bytes were written, and the first compared tensor whose bytes
 *   changed (`changed`; absent when none did or none was compared)
 */
export function rewriteGgufTensors(
  layout: GgufLayout,
  tensors: NamedTensors,
  opts: GgufRewriteOptions = {},
): { tensors: number; bytes: number; changed?: string } {
  const fd = openSync(layout.path, 'r+');
  let n = 0;
  let bytes = 0;
  let changed: string | undefined;
  try {
    for (const [name, t] of Object.entries(tensors)) {
      const p = layout.tensors.get(name);
      if (!p) continue;
      const at = layout.dataStart + p.info.offset;
      const next = encodePlacement(p, t.data);
      if (changed === undefined && opts.compare?.(name)) {
        // Only until the first difference: an update changes its first tensor almost always.
        if (!readBytes(fd, at, next.length).equals(next)) changed = name;
      }
      writeBytes(fd, at, next);
      n++;
      bytes += p.info.bytes;
    }
  } finally {
    closeSync(fd);
  }
  return changed === undefined ? { tensors: n, bytes } : { tensors: n, bytes, changed };
}

/** The raw bytes of one tensor (HF name) of a GGUF written by {@link writeGguf}. */
export function readGgufTensorBytes(layout: GgufLayout, hfName: string): Buffer {
  const p = placement(layout, hfName);
  const fd = openSync(layout.path, 'r');
  try {
    return readBytes(fd, layout.dataStart + p.info.offset, p.info.bytes);
  } finally {
    closeSync(fd);
  }
}

/** Overwrites one tensor's raw bytes (as {@link readGgufTensorBytes} returned them), in place. */
export function writeGgufTensorBytes(layout: GgufLayout, hfName: string, bytes: Uint8Array): void {
  const p = placement(layout, hfName);
  if (bytes.length !== p.info.bytes)
    throw new GgufError(`tensor '${hfName}': ${bytes.length} bytes, slot ${p.info.bytes}`);
  const fd = openSync(layout.path, 'r+');
  try {
    writeBytes(fd, layout.dataStart + p.info.offset, bytes);
  } finally {
    closeSync(fd);
  }
}

function placement(layout: GgufLayout, hfName: string): GgufPlacement {
  const p = layout.tensors.get(hfName);
  if (!p) throw new GgufError(`tensor '${hfName}' is not in ${layout.path}`);
  return p;
}

/** Converts the HF checkpoint in `dir` (config, weights, tokenizer) to a GGUF at `out`. */
export function convertHfToGguf(
  dir: string,
  out: string,
  opts: Omit<GgufWriteOptions, 'tokenizerDir'> = {},
): GgufLayout {
  return writeGguf(out, readConfig(dir), readWeights(dir), { ...opts, tokenizerDir: dir });
}

if (import.meta.url === pathToFileURL(resolve(process.argv[1] ?? '')).href) {
  const [dir, out, dtype] = process.argv.slice(2);
  if (!dir || !out) {
    console.error('usage: convert.ts <hf-dir> <out.gguf> [f32|f16|bf16|q8_0]');
    process.exit(2);
  }
  const t0 = performance.now();
  const layout = convertHfToGguf(dir, out, { dtype: (dtype ?? 'f32') as GgufDtype });
  console.log(
    `${out}: ${layout.tensors.size} tensors, ${layout.dtype}, ${(performance.now() - t0).toFixed(0)} ms`,
  );
}
