/**
 * Hub repo specs as users write them (`Qwen/Qwen3-0.6B`, `openai/gsm8k@main`,
 * `org/name@3f2a…`), and which files of a repo a load needs. Pure: no I/O.
 *
 * @module
 */
import { HubError } from './errors.ts';

/** Whether a repo holds a model or a dataset (the Hub's two URL spaces). */
export type HubRepoType = 'model' | 'dataset';

/** A parsed `org/name[@revision]`. */
export interface HubSpec {
  /** `org/name`. */
  readonly repo: string;
  /** A branch, tag or commit. @default 'main' */
  readonly revision: string;
}

// The Hub's repo names: letters, digits, `-`, `_`, `.`, at most 96 characters, not starting or
// ending with `-` or `.`; a revision is a branch, tag, `refs/pr/N` or a commit.
const part = '[A-Za-z0-9_](?:[\\w.-]{0,94}[A-Za-z0-9_])?';
const specPattern = new RegExp(`^(${part}/${part})(?:@([\\w./-]{1,200}))?$`);

/**
 * Whether `spec` reads as a Hub repo id (`org/name` or `org/name@rev`). Syntax only: a local
 * directory of the same name wins where a flag takes both (see `resolveCheckpointSpec`).
 *
 * @example
 * isHubId('Qwen/Qwen3-0.6B'); // true
 * isHubId('./ckpt/run-1'); // false
 */
export function isHubId(spec: string): boolean {
  const m = specPattern.exec(spec);
  return m !== null && !m[1]!.includes('..') && !(m[2] ?? '').includes('..');
}

/**
 * `org/name@rev` as repo and revision (`main` when none is given); throws `HUB_SPEC` otherwise.
 *
 * @example
 * parseHubSpec('openai/gsm8k@refs/pr/1'); // { repo: 'openai/gsm8k', revision: 'refs/pr/1' }
 */
export function parseHubSpec(spec: string): HubSpec {
  const m = specPattern.exec(spec);
  if (!m || !isHubId(spec))
    throw new HubError(
      'HUB_SPEC',
      `'${spec}' is not a Hub repo id (org/name or org/name@revision)`,
    );
  return { repo: m[1]!, revision: m[2] ?? 'main' };
}

/** Whether `rev` is a full commit hash (a snapshot folder name). */
export const isCommit = (rev: string): boolean => /^[0-9a-f]{40}$/.test(rev);

const modelFiles = new Set([
  'config.json',
  'generation_config.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'added_tokens.json',
  'vocab.json',
  'vocab.txt',
  'merges.txt',
  'tokenizer.model',
  'chat_template.jinja',
  'chat_template.json',
  'adapter_config.json',
  'model.safetensors.index.json',
]);

/**
 * The files a model load reads: config, generation config, tokenizer files, chat template, the
 * safetensors weights and their index, a PEFT adapter; never `*.bin`, `*.pth`, ONNX or GGUF copies,
 * nor anything in a sub-folder (`onnx/`, `original/`).
 */
export function isModelFile(path: string): boolean {
  if (path.includes('/')) return false;
  return modelFiles.has(path) || path.endsWith('.safetensors');
}

/** The files a dataset read takes: its data files and its card (which names configs and splits). */
export function isDatasetFile(path: string): boolean {
  return path === 'README.md' || /\.(parquet|jsonl|json|csv)$/.test(path);
}
