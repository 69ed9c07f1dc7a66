/**
 * HF-format model directories (config.json, model.safetensors, generation_config.json,
 * tokenizer files) and training checkpoints (the same plus optimizer state and step).
 *
 * @module
 */
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { initBackend } from './backend.ts';
import { configJson, resolveConfig, type LlamaConfig, type SaveDtype } from './config.ts';
import { CausalLM } from './llama.ts';
import { mergeLoraAdapter, readLoraAdapter } from './lora-adapter.ts';
import { readSafetensorsFile, serializeSafetensors } from './safetensors.ts';
import { loadTokenizer, type ChatTokenizer } from './tokenizer.ts';
import type { NamedTensors } from './tensors.ts';
import { ModelError } from './errors.ts';

/** A loaded model directory. */
export interface LoadedModel {
  model: CausalLM;
  /** Present when the directory has a tokenizer.json. */
  tokenizer?: ChatTokenizer;
  /** generation_config.json, or `{}`. */
  generationConfig: Record<string, unknown>;
  dir: string;
}

const tokenizerFiles = [
  'tokenizer.json',
  'tokenizer_config.json',
  'chat_template.jinja',
  'special_tokens_map.json',
];

/** Reads config.json from an HF model directory (strictly: see `resolveConfig`). */
export function readConfig(dir: string): LlamaConfig {
  const p = join(dir, 'config.json');
  if (!existsSync(p)) throw new ModelError('MODEL_FILE_MISSING', `no config.json in ${dir}`);
  return resolveConfig(JSON.parse(readFileSync(p, 'utf8')), p);
}

/** Named tensors and the file each came from. */
export interface CheckpointWeights {
  tensors: NamedTensors;
  /** The file holding a tensor, or (for a name not in it) the checkpoint's main file. */
  sourceOf: (name: string) => string;
}

/**
 * Reads the weights of an HF model directory as float32 tensors: `model.safetensors`, or the
 * shards listed in `model.safetensors.index.json`, with the file of each tensor.
 */
export function readCheckpointWeights(dir: string): CheckpointWeights {
  const p = join(dir, 'model.safetensors');
  if (existsSync(p)) return { tensors: readSafetensorsFile(p).tensors, sourceOf: () => p };
  const indexPath = join(dir, 'model.safetensors.index.json');
  if (!existsSync(indexPath))
    throw new ModelError('MODEL_FILE_MISSING', `no model.safetensors (or its index) in ${dir}`);
  const index = JSON.parse(readFileSync(indexPath, 'utf8')) as {
    weight_map?: Record<string, string>;
  };
  const weightMap = index.weight_map ?? {};
  const shards = [...new Set(Object.values(weightMap))];
  if (!shards.length) throw new ModelError('MODEL_CHECKPOINT', `${indexPath} lists no shards`);
  const tensors: NamedTensors = {};
  const fileOf = new Map<string, string>();
  for (const shard of shards) {
    const file = join(dir, shard);
    for (const [name, t] of Object.entries(readSafetensorsFile(file).tensors)) {
      if (weightMap[name] !== shard)
        throw new ModelError(
          'MODEL_CHECKPOINT',
          `${file}: tensor '${name}' is not listed for this shard in ${indexPath}`,
        );
      tensors[name] = t;
      fileOf.set(name, file);
    }
  }
  for (const name of Object.keys(weightMap)) {
    if (!tensors[name])
      throw new ModelError(
        'MODEL_CHECKPOINT',
        `${indexPath}: tensor '${name}' is listed in ${weightMap[name]} but not there`,
      );
  }
  return { tensors, sourceOf: (name) => fileOf.get(name) ?? indexPath };
}

/** The tensors of {@link readCheckpointWeights}. */
export function readWeights(dir: string): NamedTensors {
  return readCheckpointWeights(dir).tensors;
}

/**
 * Loads an HF model directory onto the current TF.js backend (initialising it if needed). The
 * config and the tensors are checked strictly: what this model would not compute as
 * transformers does is an error naming the field or tensor and the file.
 *
 * @example
 * const { model, tokenizer } = await loadModel('model/pretrained/rtjob-tiny-math');
 */
export async function loadModel(
  dir: string,
  opts: { valueHead?: boolean } = {},
): Promise<LoadedModel> {
  await initBackend();
  const config = readConfig(dir);
  const { tensors, sourceOf } = readCheckpointWeights(dir);
  const model = CausalLM.fromTensors(config, tensors, { ...opts, source: sourceOf, consume: true });
  const tokenizer = existsSync(join(dir, 'tokenizer.json')) ? loadTokenizer(dir) : undefined;
  const gcPath = join(dir, 'generation_config.json');
  const generationConfig = existsSync(gcPath)
    ? (JSON.parse(readFileSync(gcPath, 'utf8')) as Record<string, unknown>)
    : {};
  return { model, tokenizer, generationConfig, dir };
}

/**
 * Writes `data` to `path` through a temporary file and a rename, in pieces: one `write` takes at
 * most 2 GiB, and a float32 model of 0.6B parameters is more.
 */
export function writeAtomic(path: string, data: string | Uint8Array): void {
  const tmp = `${path}.tmp-${process.pid}`;
  if (typeof data === 'string') writeFileSync(tmp, data);
  else {
    const fd = openSync(tmp, 'w');
    try {
      for (let done = 0; done < data.length; )
        done += writeSync(fd, data, done, Math.min(data.length - done, 1 << 30));
    } finally {
      closeSync(fd);
    }
  }
  renameSync(tmp, path);
}

/** Options of {@link saveModel}. */
export interface SaveModelOptions {
  /** Copy tokenizer files from this directory. */
  tokenizerFrom?: string;
  /** Write these tokenizer file contents instead. */
  tokenizerFiles?: { tokenizerJson: object; tokenizerConfig: Record<string, unknown> };
  generationConfig?: Record<string, unknown>;
  /** Tensor dtype on disk; config.json's dtype field says the same. @default 'float32' */
  dtype?: SaveDtype;
  /**
   * Above this many bytes of tensors, write shards of at most this size and
   * `model.safetensors.index.json`, as transformers' `max_shard_size` does. @default 5 GB
   */
  maxShardBytes?: number;
}

/** transformers' default `max_shard_size` ("5GB"). */
export const defaultMaxShardBytes = 5e9;
const shardPattern = /^model-\d{5}-of-\d{5}\.safetensors$/;

/**
 * Writes an HF model directory: config.json (as read, with the dtype field set), the weights
 * (`model.safetensors`, or shards plus `model.safetensors.index.json` above `maxShardBytes`),
 * generation_config.json and tokenizer files. Files are written atomically (tmp + rename), and
 * weights of an earlier save in the other layout are removed so the directory is unambiguous.
 */
export function saveModel(dir: string, model: CausalLM, opts: SaveModelOptions = {}): void {
  mkdirSync(dir, { recursive: true });
  const dtype = opts.dtype ?? 'float32';
  writeAtomic(join(dir, 'config.json'), configJson(model.config, dtype));
  saveTensors(dir, model.exportWeights(), { dtype, maxShardBytes: opts.maxShardBytes });
  const eos = model.config.eos_token_id;
  const gc = opts.generationConfig ?? {
    bos_token_id: model.config.bos_token_id,
    eos_token_id: eos,
    do_sample: true,
    temperature: 1.0,
  };
  writeAtomic(join(dir, 'generation_config.json'), JSON.stringify(gc, null, 2) + '\n');
  if (opts.tokenizerFiles) {
    writeAtomic(
      join(dir, 'tokenizer.json'),
      JSON.stringify(opts.tokenizerFiles.tokenizerJson) + '\n',
    );
    writeAtomic(
      join(dir, 'tokenizer_config.json'),
      JSON.stringify(opts.tokenizerFiles.tokenizerConfig, null, 2) + '\n',
    );
  } else if (opts.tokenizerFrom && opts.tokenizerFrom !== dir) {
    for (const f of tokenizerFiles) {
      const src = join(opts.tokenizerFrom, f);
      if (existsSync(src)) copyFileSync(src, join(dir, f));
    }
  }
}

/**
 * Writes weights into an HF model directory as `model.safetensors`, or, above `maxShardBytes`,
 * as shards in name order of at most that size (a larger tensor gets a shard of its own) plus
 * `model.safetensors.index.json`; removes weights of an earlier save in the other layout.
 */
export function saveTensors(
  dir: string,
  tensors: NamedTensors,
  opts: { dtype?: SaveDtype; maxShardBytes?: number } = {},
): void {
  const dtype = opts.dtype ?? 'float32';
  const maxShardBytes = opts.maxShardBytes ?? defaultMaxShardBytes;
  const bytesPer = dtype === 'bfloat16' ? 2 : 4;
  const st = dtype === 'bfloat16' ? 'BF16' : 'F32';
  const names = Object.keys(tensors);
  const sizeOf = (n: string): number => tensors[n]!.data.length * bytesPer;
  const total = names.reduce((a, n) => a + sizeOf(n), 0);
  const stale = readdirSync(dir).filter(
    (f) => shardPattern.test(f) || f === 'model.safetensors.index.json',
  );
  if (total <= maxShardBytes) {
    writeAtomic(
      join(dir, 'model.safetensors'),
      serializeSafetensors(tensors, { format: 'pt' }, st),
    );
    stale.forEach((f) => rmSync(join(dir, f), { force: true }));
    return;
  }
  const groups: string[][] = [[]];
  let size = 0;
  for (const n of names) {
    if (size > 0 && size + sizeOf(n) > maxShardBytes) {
      groups.push([]);
      size = 0;
    }
    groups[groups.length - 1]!.push(n);
    size += sizeOf(n);
  }
  const pad = (i: number): string => String(i).padStart(5, '0');
  const weightMap: Record<string, string> = {};
  const written = new Set<string>();
  groups.forEach((g, i) => {
    const file = `model-${pad(i + 1)}-of-${pad(groups.length)}.safetensors`;
    // One shard at a time: the serialised bytes of the whole model never exist at once.
    writeAtomic(
      join(dir, file),
      serializeSafetensors(
        Object.fromEntries(g.map((n) => [n, tensors[n]!])),
        { format: 'pt' },
        st,
      ),
    );
    g.forEach((n) => (weightMap[n] = file));
    written.add(file);
  });
  const index = { metadata: { total_size: total }, weight_map: weightMap };
  writeAtomic(join(dir, 'model.safetensors.index.json'), JSON.stringify(index, null, 2) + '\n');
  rmSync(join(dir, 'model.safetensors'), { force: true });
  stale
    .filter((f) => !written.has(f) && f !== 'model.safetensors.index.json')
    .forEach((f) => rmSync(join(dir, f), { force: true }));
}

/**
 * Merges a PEFT LoRA adapter into its base and writes the result as a full HF model directory
 * (`W + (alpha / r) · B·A` per adapted module, `mergeLoraAdapter`; config, generation config and
 * tokenizer files copied from the base). The base is `base`, else the adapter config's
 * `base_model_name_or_path`. Nothing is loaded onto a backend: the merge runs on the arrays.
 *
 * @throws ModelError `MODEL_FILE_MISSING` when the base is not a model directory;
 *   `MODEL_CHECKPOINT` when the adapter does not fit it
 */
export function mergeLoraCheckpoint(
  adapterDir: string,
  opts: { base?: string; savePath: string; dtype?: SaveDtype },
): { base: string; modules: number } {
  const adapter = readLoraAdapter(adapterDir);
  const base = opts.base ?? adapter.config.baseModel;
  if (!base || !existsSync(join(base, 'config.json')))
    throw new ModelError(
      'MODEL_FILE_MISSING',
      `LoRA merge: no base model directory${base ? ` at ${base}` : ''} (give the base with --pretrain)`,
    );
  const config = readConfig(base);
  const merged = mergeLoraAdapter(readWeights(base), adapter);
  const dtype = opts.dtype ?? 'float32';
  mkdirSync(opts.savePath, { recursive: true });
  writeAtomic(join(opts.savePath, 'config.json'), configJson(config, dtype));
  saveTensors(opts.savePath, merged, { dtype });
  for (const f of [...tokenizerFiles, 'generation_config.json']) {
    const src = join(base, f);
    if (existsSync(src) && base !== opts.savePath) copyFileSync(src, join(opts.savePath, f));
  }
  const modules = Object.keys(adapter.tensors).filter((n) => n.endsWith('lora_A.weight')).length;
  return { base, modules };
}
