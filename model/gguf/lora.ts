/**
 * A PEFT LoRA adapter as a GGUF LoRA adapter for llama.cpp (`llama_adapter_lora_init`), so an
 * engine serving a base GGUF applies the adapter on top of it without rewriting the base.
 *
 * What llama.cpp reads (its `src/llama-adapter.cpp`, and `convert_lora_to_gguf.py`, which writes
 * the same from PEFT): metadata `general.type = "adapter"`, `general.architecture` equal to the
 * base model's, `adapter.type = "lora"`, `adapter.lora.alpha` (f32; the update is scaled by
 * `alpha / r`, r read from the tensors); per adapted base tensor `W` (llama.cpp's name, e.g.
 * `blk.0.attn_q.weight`) two tensors `W.lora_a` and `W.lora_b`, whose ggml shapes must be
 * `a.ne = [W.ne[0], r]` and `b.ne = [r, W.ne[1]]`: in row-major terms A is `[r, in]` and B is
 * `[out, r]`, PEFT's own layouts. The base conversion's row transforms apply to B: Llama's q/k
 * rows are permuted to llama.cpp's interleaved RoPE pairs, so B's rows are permuted the same way
 * (A, acting on the input, is not). llama.cpp copies the tensors into buffers of its own at load,
 * so the file may be removed afterwards.
 *
 * ```sh
 * node --import tsx model/gguf/lora.ts <peft-adapter-dir> <base-hf-dir> <out.gguf>
 * ```
 *
 * @module
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { LlamaConfig } from '../config.ts';
import { readConfig } from '../checkpoint.ts';
import { parsePeftTensorName, readLoraAdapter, type LoraAdapter } from '../lora-adapter.ts';
import { ggufArch, ggufTensorName, permuteRotary } from './convert.ts';
import { encodeGgufHeader, encodeTensor, GgufError, type GgufValue } from './format.ts';

/**
 * Writes `adapter` (trained on a `config` model) to `path` as a GGUF LoRA adapter, f32.
 *
 * @returns the bytes written
 * @throws GgufError for an adapter llama.cpp cannot apply to this model (a module without its
 *   A or B, shapes that do not fit the base)
 * @example
 * writeGgufLoraAdapter('/tmp/a.gguf', readConfig(base), readLoraAdapter(dir));
 */
export function writeGgufLoraAdapter(
  path: string,
  config: LlamaConfig,
  adapter: LoraAdapter,
): number {
  const arch = ggufArch(config);
  const modules = new Map<
    string,
    { A?: Float32Array; B?: Float32Array; out: number; in: number }
  >();
  const r = adapter.config.r;
  for (const [name, t] of Object.entries(adapter.tensors)) {
    const p = parsePeftTensorName(name);
    if (!p) throw new GgufError(`LoRA tensor ${name} is not a lora_A or lora_B matrix`);
    const m = modules.get(p.module) ?? { out: 0, in: 0 };
    if (p.which === 'A') {
      if (t.shape[0] !== r) throw new GgufError(`${name}: shape [${t.shape}] is not rank ${r}`);
      m.A = t.data;
      m.in = t.shape[1]!;
    } else {
      if (t.shape[1] !== r) throw new GgufError(`${name}: shape [${t.shape}] is not rank ${r}`);
      m.B = t.data;
      m.out = t.shape[0]!;
    }
    modules.set(p.module, m);
  }
  const heads = (module: string): number | undefined => {
    if (arch !== 'llama') return undefined;
    if (module.endsWith('self_attn.q_proj')) return config.num_attention_heads;
    if (module.endsWith('self_attn.k_proj')) return config.num_key_value_heads;
    return undefined;
  };
  const tensors: { name: string; shape: number[]; data: Float32Array }[] = [];
  for (const [module, m] of modules) {
    if (!m.A || !m.B) throw new GgufError(`LoRA module ${module} has no lora_${m.A ? 'B' : 'A'}`);
    const base = ggufTensorName(`${module}.weight`);
    const h = heads(module);
    tensors.push({ name: `${base}.lora_a`, shape: [r, m.in], data: m.A });
    tensors.push({
      name: `${base}.lora_b`,
      shape: [m.out, r],
      data: h ? permuteRotary(m.B, m.out, h) : m.B,
    });
  }
  const metadata: [string, GgufValue][] = [
    ['general.architecture', { type: 'str', value: arch }],
    ['general.type', { type: 'str', value: 'adapter' }],
    ['general.name', { type: 'str', value: 'rtjob-lora' }],
    ['adapter.type', { type: 'str', value: 'lora' }],
    ['adapter.lora.alpha', { type: 'f32', value: adapter.config.alpha }],
  ];
  const { header, tensors: laid } = encodeGgufHeader(
    metadata,
    tensors.map((t) => ({ name: t.name, shape: t.shape, dtype: 'f32' as const })),
  );
  const fd = openSync(path, 'w');
  let end = header.length;
  try {
    writeSync(fd, header, 0, header.length, 0);
    tensors.forEach((t, i) => {
      const bytes = encodeTensor('f32', t.data);
      const at = header.length + laid[i]!.offset;
      let done = 0;
      while (done < bytes.length)
        done += writeSync(fd, bytes, done, bytes.length - done, at + done);
      end = Math.max(end, at + bytes.length);
    });
    const padded = Math.ceil(end / 32) * 32;
    if (padded > end) writeSync(fd, Buffer.alloc(padded - end), 0, padded - end, end);
  } finally {
    closeSync(fd);
  }
  return Math.ceil(end / 32) * 32;
}

if (import.meta.url === pathToFileURL(resolve(process.argv[1] ?? '')).href) {
  const [adapterDir, baseDir, out] = process.argv.slice(2);
  if (!adapterDir || !baseDir || !out) {
    console.error('usage: lora.ts <peft-adapter-dir> <base-hf-dir> <out.gguf>');
    process.exit(2);
  }
  const bytes = writeGgufLoraAdapter(out, readConfig(baseDir), readLoraAdapter(adapterDir));
  console.log(`${out}: ${(bytes / 2 ** 20).toFixed(2)} MiB`);
}
