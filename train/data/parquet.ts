/**
 * Parquet files read one row group at a time (hyparquet), so a file larger than memory streams:
 * what is held at once is one row group of the columns asked for. Pages compressed with snappy
 * (hyparquet's own), zstd, gzip, brotli or lz4 (hyparquet-compressors) are read. Values come out
 * as JSON would carry them: 64-bit integers as numbers (strings past 2^53), nested lists and
 * structs (a `context_messages` column of `[{role, content}]`) as arrays and objects.
 *
 * @module
 */
import {
  asyncBufferFromFile,
  parquetMetadataAsync,
  parquetReadObjects,
  parquetSchema,
} from 'hyparquet';
import { compressors } from 'hyparquet-compressors';
import { DatasetError } from './errors.ts';
import type { DataRecord } from './text-formats.ts';

/** A parquet value as plain JSON data: bigints become numbers (or strings when too large). */
function plain(v: unknown): unknown {
  if (typeof v === 'bigint')
    return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER)
      ? Number(v)
      : v.toString();
  if (Array.isArray(v)) return v.map(plain);
  if (v instanceof Date || v instanceof Uint8Array || v === null || typeof v !== 'object') return v;
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
}

/** The top-level column names of a parquet file. */
export async function parquetColumns(path: string): Promise<string[]> {
  const file = await asyncBufferFromFile(path);
  const metadata = await parquetMetadataAsync(file);
  return parquetSchema(metadata).children.map((c) => c.element.name);
}

/** The records of a parquet file, one row group read at a time; `columns` only, when given. */
export async function* parquetRecords(
  path: string,
  columns?: readonly string[],
): AsyncGenerator<DataRecord> {
  const file = await asyncBufferFromFile(path);
  let metadata;
  try {
    metadata = await parquetMetadataAsync(file);
  } catch (err) {
    throw new DatasetError(
      'DATASET_FORMAT',
      path,
      `${path} is not a parquet file (${String(err)})`,
      {
        cause: err,
      },
    );
  }
  const names = parquetSchema(metadata).children.map((c) => c.element.name);
  const missing = columns?.filter((c) => !names.includes(c)) ?? [];
  if (missing.length > 0)
    throw new DatasetError(
      'DATASET_COLUMN',
      path,
      `column '${missing[0]}' is not in ${path} (columns: ${names.join(', ')})`,
    );
  let rowStart = 0;
  for (const group of metadata.row_groups) {
    const rowEnd = rowStart + Number(group.num_rows);
    const rows = await parquetReadObjects({
      file,
      metadata,
      rowStart,
      rowEnd,
      compressors,
      ...(columns ? { columns: [...columns] } : {}),
    });
    rowStart = rowEnd;
    for (const r of rows) yield plain(r) as DataRecord;
  }
}
