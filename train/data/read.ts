/**
 * `readRecords`: the one door to a dataset on disk. A spec is a file (parquet, JSONL, JSON, CSV)
 * or a directory in the Hub's layout (`layout.ts`), with an optional `@config` suffix
 * (`gsm8k@main`, OpenRLHF's `name@data_dir`) or OpenRLHF's `json@DIR` builder form. Records come
 * as an async stream, file after file of the split, so a large dataset is never in memory whole.
 *
 * @example
 * for await (const r of readRecords('data/gsm8k@main', { split: 'test', maxSamples: 100 }))
 *   console.log(r.question);
 *
 * @module
 */
import { existsSync, statSync } from 'node:fs';
import { DatasetError } from './errors.ts';
import { dataFormats, formatOf, splitFiles } from './layout.ts';
import { parquetRecords } from './parquet.ts';
import { csvRecords, type DataRecord, jsonlRecords, jsonRecords } from './text-formats.ts';

/** Options of {@link readRecords}. */
export interface ReadOptions {
  /** The split of a directory (a single file is all one split). @default 'train' */
  split?: string;
  /** A config folder of a directory; a `@config` suffix of the spec sets it too. */
  config?: string;
  /** Records read at most (the first ones). @default all */
  maxSamples?: number;
  /** Only these fields of each record; one that is not there is an error naming those that are. */
  columns?: readonly string[];
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
export function datasetFiles(spec: string, opts: Pick<ReadOptions, 'split' | 'config'> = {}): string[] {
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

function fileRecords(path: string, columns?: readonly string[]): AsyncGenerator<DataRecord> {
  switch (formatOf(path)) {
    case 'parquet':
      return parquetRecords(path, columns);
    case 'csv':
      return csvRecords(path);
    case 'json':
      return jsonRecords(path);
    default:
      return jsonlRecords(path);
  }
}

/** `r` with only `columns`; the first record of a file checks they are there. */
function project(r: DataRecord, columns: readonly string[], path: string, first: boolean): DataRecord {
  if (first) {
    const missing = columns.find((c) => !Object.hasOwn(r, c));
    if (missing !== undefined)
      throw new DatasetError(
        'DATASET_COLUMN',
        path,
        `column '${missing}' is not in ${path} (columns: ${Object.keys(r).join(', ')})`,
      );
  }
  return Object.fromEntries(columns.map((c) => [c, r[c]]));
}

/** The records of a dataset file or directory, as a stream (see the module's doc). */
export async function* readRecords(
  spec: string,
  opts: ReadOptions = {},
): AsyncGenerator<DataRecord> {
  const max = opts.maxSamples ?? Infinity;
  if (max <= 0) return;
  let n = 0;
  for (const path of datasetFiles(spec, opts)) {
    let first = true;
    for await (const r of fileRecords(path, opts.columns)) {
      yield opts.columns ? project(r, opts.columns, path, first) : r;
      first = false;
      if (++n >= max) return;
    }
  }
}
