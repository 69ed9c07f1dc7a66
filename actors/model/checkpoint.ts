/**
 * HF-format model directories (config.json, model.safetensors, generation_config.json,
 * tokenizer files) and training checkpoints (the same plus optimizer state and step).
 *
 * @module
 */
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { initBackend } from './backend.ts';
import { resolveConfig, type LlamaConfig } from './config.ts';
import { CausalLM } from './llama.ts';
import { parseSafetensors, serializeSafetensors } from './safetensors.ts';
import { loadTokenizer, type ChatTokenizer } from './tokenizer.ts';
import type { NamedTensors } from '../engines/types.ts';

/** A loaded model directory. */
export interface LoadedModel {
  model: CausalLM;
  /** Present when the directory has a tokenizer.json. */
  tokenizer?: ChatTokenizer;
  /** generation_config.json, or `{}`. */
  generationConfig: Record<string, unknown>;
  dir: string;
}

const tokenizerFiles = ['tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja', 'special_tokens_map.json'];

/** Reads config.json from an HF model directory. */
export function readConfig(dir: string): LlamaConfig {
  const p = join(dir, 'config.json');
  if (!existsSync(p)) throw new Error(`no config.json in ${dir}`);
  return resolveConfig(JSON.parse(readFileSync(p, 'utf8')));
}

/**
 * Reads the weights of an HF model directory as named float32 tensors: `model.safetensors`, or
 * the shards listed in `model.safetensors.index.json`.
 */
export function readWeights(dir: string): NamedTensors {
  const p = join(dir, 'model.safetensors');
  if (existsSync(p)) return parseSafetensors(readFileSync(p), p).tensors;
  const indexPath = join(dir, 'model.safetensors.index.json');
  if (!existsSync(indexPath)) throw new Error(`no model.safetensors (or its index) in ${dir}`);
  const index = JSON.parse(readFileSync(indexPath, 'utf8')) as { weight_map?: Record<string, string> };
  const shards = [...new Set(Object.values(index.weight_map ?? {}))];
  if (!shards.length) throw new Error(`${indexPath} lists no shards`);
  const out: NamedTensors = {};
  for (const shard of shards) Object.assign(out, parseSafetensors(readFileSync(join(dir, shard)), join(dir, shard)).tensors);
  return out;
}

/**
 * Loads an HF model directory onto the current TF.js backend (initialising it if needed).
 *
 * @example
 * const { model, tokenizer } = await loadModel('actors/model/pretrained/rtjob-tiny-math');
 */
export async function loadModel(dir: string, opts: { valueHead?: boolean } = {}): Promise<LoadedModel> {
  await initBackend();
  const config = readConfig(dir);
  const model = CausalLM.fromTensors(config, readWeights(dir), opts);
  const tokenizer = existsSync(join(dir, 'tokenizer.json')) ? loadTokenizer(dir) : undefined;
  const gcPath = join(dir, 'generation_config.json');
  const generationConfig = existsSync(gcPath) ? (JSON.parse(readFileSync(gcPath, 'utf8')) as Record<string, unknown>) : {};
  return { model, tokenizer, generationConfig, dir };
}

function writeAtomic(path: string, data: string | Uint8Array): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, data);
  renameSync(tmp, path);
}

/** Options of {@link saveModel}. */
export interface SaveModelOptions {
  /** Copy tokenizer files from this directory. */
  tokenizerFrom?: string;
  /** Write these tokenizer file contents instead. */
  tokenizerFiles?: { tokenizerJson: object; tokenizerConfig: Record<string, unknown> };
  generationConfig?: Record<string, unknown>;
}

/**
 * Writes an HF model directory: config.json, model.safetensors (F32), generation_config.json and
 * tokenizer files. Files are written atomically (tmp + rename).
 */
export function saveModel(dir: string, model: CausalLM, opts: SaveModelOptions = {}): void {
  mkdirSync(dir, { recursive: true });
  writeAtomic(join(dir, 'config.json'), JSON.stringify(model.config, null, 2) + '\n');
  writeAtomic(join(dir, 'model.safetensors'), serializeSafetensors(model.exportWeights()));
  const eos = model.config.eos_token_id;
  const gc = opts.generationConfig ?? { bos_token_id: model.config.bos_token_id, eos_token_id: eos, do_sample: true, temperature: 1.0 };
  writeAtomic(join(dir, 'generation_config.json'), JSON.stringify(gc, null, 2) + '\n');
  if (opts.tokenizerFiles) {
    writeAtomic(join(dir, 'tokenizer.json'), JSON.stringify(opts.tokenizerFiles.tokenizerJson) + '\n');
    writeAtomic(join(dir, 'tokenizer_config.json'), JSON.stringify(opts.tokenizerFiles.tokenizerConfig, null, 2) + '\n');
  } else if (opts.tokenizerFrom && opts.tokenizerFrom !== dir) {
    for (const f of tokenizerFiles) {
      const src = join(opts.tokenizerFrom, f);
      if (existsSync(src)) copyFileSync(src, join(dir, f));
    }
  }
}
