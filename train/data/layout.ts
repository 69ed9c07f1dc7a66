/**
 * Which files of a dataset directory hold a split, by the Hugging Face Hub's conventions, so a
 * Hub snapshot or a local copy of one reads as the Hub shows it:
 * - `data/{split}-00000-of-00002.parquet` (what the Hub's parquet conversion and `push_to_hub`
 *   write), `{split}.jsonl`, `my_train_file.csv` (a split keyword between `-._ ` or digits);
 * - a folder per split: `data/{split}/*.parquet`, `{split}/…`;
 * - a folder per config: `main/train-00000-of-00001.parquet` for `openai/gsm8k`, chosen by
 *   `DIR@main` (OpenRLHF's `name@data_dir`), or alone when it is the only one;
 * - files with no split keyword at all are the `train` split.
 * Only the layout: configs declared in a README's YAML header are not read. Light on imports:
 * the CLI checks a spec with it before a cluster starts.
 *
 * @module
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { DatasetError } from './errors.ts';

/** The file formats a dataset may be in, by extension. */
export const dataFormats = ['parquet', 'jsonl', 'json', 'csv'] as const;
/** One of {@link dataFormats}. */
export type DataFormat = (typeof dataFormats)[number];

/** The format of `path` by its extension, or undefined. */
export function formatOf(path: string): DataFormat | undefined {
  const ext = /\.(\w+)$/.exec(path)?.[1]?.toLowerCase();
  return (dataFormats as readonly string[]).includes(ext ?? '') ? (ext as DataFormat) : undefined;
}

/** The Hub's split keywords: a file or folder named by any of them belongs to the split. */
const splitKeywords: Readonly<Record<string, readonly string[]>> = {
  train: ['train', 'training'],
  validation: ['validation', 'valid', 'val', 'dev'],
  test: ['test', 'testing', 'eval', 'evaluation'],
};

const keywords = new Set(Object.values(splitKeywords).flat());

/** The split a file's name or a folder's name says, or undefined. */
function splitOf(name: string): string | undefined {
  const stem = name.replace(/\.\w+$/, '');
  const sharded = /^(.+?)-\d{5}-of-\d{5}$/.exec(stem);
  if (sharded) return sharded[1];
  for (const [split, words] of Object.entries(splitKeywords))
    for (const w of words)
      if (new RegExp(`(^|[-._ ])${w}([-._ 0-9]|$)`, 'i').test(stem)) return split;
  return undefined;
}

const isDir = (p: string): boolean => existsSync(p) && statSync(p).isDirectory();

/** The data files under `dir`, at any depth, sorted (symlinks followed: a Hub snapshot's are). */
function dataFilesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    if (name.startsWith('.')) continue;
    const p = join(dir, name);
    if (isDir(p)) out.push(...dataFilesUnder(p));
    else if (formatOf(name)) out.push(p);
  }
  return out;
}

/** The splits found directly in `root`: files named by a split, and folders named by one. */
function splitsIn(root: string, asked: string): Map<string, string[]> {
  const splits = new Map<string, string[]>();
  const add = (split: string, files: string[]): void => {
    if (files.length > 0) splits.set(split, [...(splits.get(split) ?? []), ...files]);
  };
  const unnamed: string[] = [];
  for (const name of readdirSync(root).sort()) {
    if (name.startsWith('.')) continue;
    const p = join(root, name);
    if (isDir(p)) {
      const split = name === asked ? asked : splitOf(name);
      if (split && (name === asked || keywords.has(name.toLowerCase())))
        add(split, dataFilesUnder(p));
    } else if (formatOf(name)) {
      const split = splitOf(name);
      if (split) add(split, [p]);
      else unnamed.push(p);
    }
  }
  if (splits.size === 0) add('train', unnamed);
  return splits;
}

/** The folders of `dir` holding data files: its configs. */
function configsOf(dir: string): string[] {
  return readdirSync(dir)
    .filter((n) => !n.startsWith('.') && isDir(join(dir, n)))
    .filter((n) => dataFilesUnder(join(dir, n)).length > 0)
    .sort();
}

/**
 * The files of `split` in the dataset directory `dir` (of `config`, a folder of it, when given),
 * in order. Throws a {@link DatasetError} that names the splits or configs there are.
 */
export function splitFiles(dir: string, split: string, config?: string): string[] {
  let base = dir;
  if (config !== undefined) {
    base = join(dir, config);
    if (!isDir(base))
      throw new DatasetError(
        'DATASET_CONFIG',
        dir,
        `${dir} has no config '${config}' (configs: ${configsOf(dir).join(', ') || 'none'})`,
      );
  }
  const root = isDir(join(base, 'data')) ? join(base, 'data') : base;
  const splits = splitsIn(root, split);
  if (splits.size > 0) {
    const files = splits.get(split);
    if (files) return files;
    throw new DatasetError(
      'DATASET_SPLIT',
      dir,
      `${dir} has no split '${split}' (splits: ${[...splits.keys()].join(', ')})`,
    );
  }
  const configs = configsOf(base);
  if (configs.length === 1 && config === undefined) return splitFiles(dir, split, configs[0]);
  if (configs.length > 1)
    throw new DatasetError(
      'DATASET_CONFIG',
      dir,
      `${dir} has configs ${configs.join(', ')}: choose one as ${dir}@${configs[0]}`,
    );
  throw new DatasetError(
    'DATASET_NOT_FOUND',
    dir,
    `${dir} has no data files (${dataFormats.join(', ')})`,
  );
}

/** A spec taken apart: the local path and the config its `@` suffix names. */
export interface DatasetSpec {
  path: string;
  config?: string;
}

/** `dir@config` → `{ path: dir, config }`; OpenRLHF's `json@DIR` → `{ path: DIR }`. */
export function parseSpec(spec: string): DatasetSpec {
  const at = spec.lastIndexOf('@');
  if (at <= 0 || existsSync(spec)) return { path: spec };
  const [left, right] = [spec.slice(0, at), spec.slice(at + 1)];
  if ((dataFormats as readonly string[]).includes(left)) return { path: right };
  return { path: left, config: right };
}

/** The files of `spec`'s split, checked without reading them (the CLI's early check). */
export function datasetFiles(
  spec: string,
  opts: { split?: string; config?: string } = {},
): string[] {
  const { path, config = opts.config } = parseSpec(spec);
  if (!existsSync(path))
    throw new DatasetError('DATASET_NOT_FOUND', path, `no file or directory at ${path}`);
  if (statSync(path).isDirectory()) return splitFiles(path, opts.split ?? 'train', config);
  if (!formatOf(path))
    throw new DatasetError(
      'DATASET_FORMAT',
      path,
      `${path}: not a dataset file by its name (${dataFormats.map((f) => `.${f}`).join(', ')})`,
    );
  return [path];
}
