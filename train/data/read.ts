/**
 * `readRecords`: the one door to a dataset on disk. A spec is a file (parquet, JSONL, JSON, CSV)
 * or a directory in the Hub's layout (`layout.ts`), with an optional `@config` suffix
 * (`gsm8k@main`, OpenRLHF's `name@data_dir`) or OpenRLHF's `json@DIR` builder form (`parseSpec`). Records come
 * as an async stream, file after file of the split, so a large dataset is never in memory whole.
 *
 * @example
 * for await (const r of readRecords('data/gsm8k@main', { split: 'test', maxSamples: 100 }))
 *   console.log(r.question);
 *
 * @module
 */
import { DatasetError } from './errors.ts';
import { datasetFiles, formatOf } from './layout.ts';
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
function project(
  r: DataRecord,
  columns: readonly string[],
  path: string,
  first: boolean,
): DataRecord {
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
