/**
 * A LoRA adapter as data, in PEFT's format: its config (rank, alpha, the target modules, the base
 * it was trained on) and its tensors under PEFT's names. The one place that knows that format:
 * the trainer saves through it, `--load-lora` reads through it, the engines receive it in a
 * weight update (`{ kind: 'lora' }`), and `mergeLoraAdapter` applies `W + (alpha / r) · B·A`.
 *
 * PEFT stores, for a module `model.layers.0.self_attn.q_proj` of the base, the tensors
 * `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight` (`[r, in]`) and `…lora_B.weight`
 * (`[out, r]`); HF keeps the base weight `model.layers.0.self_attn.q_proj.weight` as `[out, in]`,
 * so the update `(alpha / r) · B·A` has the base weight's shape.
 *
 * @module
 */
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ModelError } from './errors.ts';
import { readSafetensorsFile, serializeSafetensors } from './safetensors.ts';
import type { NamedTensors } from './tensors.ts';

/** The linear modules of a Llama/Qwen decoder layer that LoRA can target. */
export const loraTargetModules = [
  'q_proj',
  'k_proj',
  'v_proj',
  'o_proj',
  'gate_proj',
  'up_proj',
  'down_proj',
] as const;
/** One of {@link loraTargetModules}. */
export type LoraTargetModule = (typeof loraTargetModules)[number];

/** An adapter's configuration (PEFT's `adapter_config.json`, the fields rtjob uses). */
export interface LoraConfig {
  /** Rank `r` of every adapter matrix. */
  r: number;
  /** `lora_alpha`: the update is scaled by `alpha / r`. */
  alpha: number;
  /** Module names the adapter applies to (short names, e.g. `q_proj`). */
  targetModules: LoraTargetModule[];
  /** `lora_dropout` during training (0 at inference). @default 0 */
  dropout: number;
  /** `base_model_name_or_path`: the checkpoint the adapter was trained on. */
  baseModel: string;
}

/** An adapter: its config and its tensors keyed by PEFT tensor names. */
export interface LoraAdapter {
  config: LoraConfig;
  tensors: NamedTensors;
}

const peftPrefix = 'base_model.model.';

/**
 * PEFT's name of the A or B matrix of the base module `module` (an HF weight name without
 * `.weight`, e.g. `model.layers.3.mlp.down_proj`).
 */
export function peftTensorName(module: string, which: 'A' | 'B'): string {
  return `${peftPrefix}${module}.lora_${which}.weight`;
}

/** The base module of a PEFT tensor name, and which matrix it is; undefined when not a LoRA tensor. */
export function parsePeftTensorName(
  name: string,
): { module: string; which: 'A' | 'B' } | undefined {
  const m = /^base_model\.model\.(.+)\.lora_([AB])(?:\.default)?\.weight$/.exec(name);
  return m ? { module: m[1]!, which: m[2] as 'A' | 'B' } : undefined;
}

/**
 * Parses `--target-modules`: `all-linear` (every linear module of the decoder layers, as PEFT's
 * `all-linear`, which leaves out the output head), or a comma-separated list of module names.
 *
 * @throws ModelError `MODEL_INPUT` naming an unknown module
 */
export function parseTargetModules(spec: string | readonly string[]): LoraTargetModule[] {
  const items = (typeof spec === 'string' ? spec.split(',') : spec)
    .map((s) => s.trim())
    .filter(Boolean);
  if (items.length === 1 && (items[0] === 'all-linear' || items[0] === 'all_linear'))
    return [...loraTargetModules];
  const out: LoraTargetModule[] = [];
  for (const it of items) {
    if (!(loraTargetModules as readonly string[]).includes(it))
      throw new ModelError(
        'MODEL_INPUT',
        `unknown LoRA target module '${it}': use all-linear or some of ${loraTargetModules.join(', ')}`,
      );
    if (!out.includes(it as LoraTargetModule)) out.push(it as LoraTargetModule);
  }
  if (out.length === 0) throw new ModelError('MODEL_INPUT', 'no LoRA target modules given');
  return out;
}

/** PEFT's `adapter_config.json` for `c`. */
export function peftConfigJson(c: LoraConfig): string {
  return `${JSON.stringify(
    {
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      base_model_name_or_path: c.baseModel,
      r: c.r,
      lora_alpha: c.alpha,
      lora_dropout: c.dropout,
      target_modules: c.targetModules,
      bias: 'none',
      fan_in_fan_out: false,
      use_rslora: false,
      use_dora: false,
      inference_mode: true,
      modules_to_save: null,
    },
    null,
    2,
  )}\n`;
}

/**
 * Writes `a` as a PEFT adapter directory (`adapter_config.json`, `adapter_model.safetensors`),
 * each file written whole to a temporary name first so a reader never sees half a file.
 */
export function writeLoraAdapter(dir: string, a: LoraAdapter): void {
  mkdirSync(dir, { recursive: true });
  const put = (name: string, bytes: string | Uint8Array) => {
    const tmp = join(dir, `.${name}.${process.pid}.tmp`);
    writeFileSync(tmp, bytes);
    renameSync(tmp, join(dir, name));
  };
  put('adapter_model.safetensors', serializeSafetensors(a.tensors, { format: 'pt' }));
  put('adapter_config.json', peftConfigJson(a.config));
}

/** True when `dir` holds a PEFT adapter. */
export function isLoraAdapterDir(dir: string): boolean {
  return existsSync(join(dir, 'adapter_config.json'));
}

/**
 * Reads a PEFT LoRA adapter directory (one written by HF PEFT or by {@link writeLoraAdapter}).
 * Tensor names are normalised to {@link peftTensorName}'s form (PEFT's in-memory `.default`
 * adapter name is dropped).
 *
 * @throws ModelError `MODEL_FILE_MISSING` without the two files; `MODEL_CHECKPOINT` for an adapter
 *   rtjob cannot apply (not LoRA, DoRA, rsLoRA, fan_in_fan_out, a tensor that is not lora_A/B, or
 *   A and B that disagree on the rank)
 */
export function readLoraAdapter(dir: string): LoraAdapter {
  const cfgPath = join(dir, 'adapter_config.json');
  const wPath = join(dir, 'adapter_model.safetensors');
  for (const p of [cfgPath, wPath])
    if (!existsSync(p)) throw new ModelError('MODEL_FILE_MISSING', `LoRA adapter: ${p} not found`);
  const raw = JSON.parse(readFileSync(cfgPath, 'utf8')) as Record<string, unknown>;
  const bad = (why: string) => new ModelError('MODEL_CHECKPOINT', `LoRA adapter ${dir}: ${why}`);
  if (raw.peft_type !== undefined && raw.peft_type !== 'LORA')
    throw bad(`peft_type ${String(raw.peft_type)} is not LORA`);
  if (raw.use_dora === true) throw bad('DoRA adapters are not supported');
  if (raw.use_rslora === true) throw bad('rsLoRA scaling is not supported');
  if (raw.fan_in_fan_out === true) throw bad('fan_in_fan_out adapters are not supported');
  const r = Number(raw.r);
  const alpha = Number(raw.lora_alpha ?? r);
  if (!Number.isInteger(r) || r <= 0)
    throw bad(`r must be a positive integer, got ${String(raw.r)}`);
  const targets = raw.target_modules;
  const targetModules = parseTargetModules(
    Array.isArray(targets) ? (targets as string[]) : String(targets ?? 'all-linear'),
  );
  const tensors: NamedTensors = {};
  for (const [name, t] of Object.entries(readSafetensorsFile(wPath).tensors)) {
    const p = parsePeftTensorName(name);
    if (!p) throw bad(`tensor ${name} is not a LoRA A or B matrix`);
    const rank = p.which === 'A' ? t.shape[0] : t.shape[1];
    if (t.shape.length !== 2 || rank !== r)
      throw bad(`tensor ${name} has shape [${t.shape}], not rank ${r}`);
    tensors[peftTensorName(p.module, p.which)] = t;
  }
  return {
    config: {
      r,
      alpha,
      targetModules,
      dropout: Number(raw.lora_dropout ?? 0),
      baseModel: String(raw.base_model_name_or_path ?? ''),
    },
    tensors,
  };
}

/**
 * The base weights with the adapter merged: for each adapted module, `W + (alpha / r) · B·A` in
 * HF layout (`[out, in]`). Tensors the adapter does not touch are returned as they are (shared,
 * not copied).
 *
 * @throws ModelError `MODEL_CHECKPOINT` when an adapted module has no base weight or the shapes
 *   disagree
 */
export function mergeLoraAdapter(base: NamedTensors, a: LoraAdapter): NamedTensors {
  const out: NamedTensors = { ...base };
  const scale = a.config.alpha / a.config.r;
  const r = a.config.r;
  for (const name of Object.keys(a.tensors)) {
    const p = parsePeftTensorName(name);
    if (!p || p.which !== 'A') continue;
    const A = a.tensors[name]!;
    const B = a.tensors[peftTensorName(p.module, 'B')];
    const W = base[`${p.module}.weight`];
    if (!B || !W)
      throw new ModelError(
        'MODEL_CHECKPOINT',
        `LoRA merge: ${B ? `no base weight ${p.module}.weight` : `${name} has no lora_B`}`,
      );
    const [outDim, inDim] = W.shape as [number, number];
    if (A.shape[1] !== inDim || B.shape[0] !== outDim)
      throw new ModelError(
        'MODEL_CHECKPOINT',
        `LoRA merge: ${p.module} is [${W.shape}] but A is [${A.shape}] and B is [${B.shape}]`,
      );
    const merged = Float32Array.from(W.data);
    for (let o = 0; o < outDim; o++) {
      const row = o * inDim;
      for (let k = 0; k < r; k++) {
        const b = scale * B.data[o * r + k]!;
        if (b === 0) continue;
        const aRow = k * inDim;
        for (let i = 0; i < inDim; i++) merged[row + i]! += b * A.data[aRow + i]!;
      }
    }
    out[`${p.module}.weight`] = { shape: W.shape, data: merged };
  }
  return out;
}
