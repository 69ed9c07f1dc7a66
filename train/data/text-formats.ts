/**
 * The text formats of a dataset file, each read as a stream of records: JSONL by line, CSV by
 * chunk (RFC 4180: quoted fields, `""` escapes, newlines inside quotes, CRLF), and JSON, which is
 * an array of objects read whole (or JSONL under a `.json` name, as the Hub's `json` builder
 * reads it). Values of CSV fields stay strings.
 *
 * @module
 */
import { createReadStream, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { DatasetError } from './errors.ts';

/** One record of a dataset file. */
export type DataRecord = Record<string, unknown>;

const isRecord = (v: unknown): v is DataRecord =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** The records of a JSONL file, one JSON object per line, read line by line. */
export async function* jsonlRecords(path: string): AsyncGenerator<DataRecord> {
  const lines = createInterface({ input: createReadStream(path), crlfDelay: Infinity });
  let n = 0;
  for await (const line of lines) {
    n++;
    if (!line.trim()) continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      throw new DatasetError('DATASET_FORMAT', path, `${path} line ${n} is not JSON`);
    }
    if (!isRecord(value))
      throw new DatasetError('DATASET_FORMAT', path, `${path} line ${n} is not a JSON object`);
    yield value;
  }
}

/** The records of a `.json` file: an array of objects, or JSONL under that name. */
export async function* jsonRecords(path: string): AsyncGenerator<DataRecord> {
  const text = readFileSync(path, 'utf8');
  if (!text.trimStart().startsWith('[')) {
    yield* jsonlRecords(path);
    return;
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new DatasetError('DATASET_FORMAT', path, `${path} is not JSON`);
  }
  const list = value as unknown[];
  for (let i = 0; i < list.length; i++) {
    const r = list[i];
    if (!isRecord(r))
      throw new DatasetError('DATASET_FORMAT', path, `${path}[${i}] is not a JSON object`);
    yield r;
  }
}

/** A CSV parser fed chunk by chunk: rows come out as soon as their line ends. */
class CsvRows {
  private field = '';
  private row: string[] = [];
  private quoted = false;
  /** A quote just closed a quoted run: a second one is an escaped quote. */
  private closed = false;
  /** Whether the current field began with a quote (so `"",` is an empty field, not nothing). */
  private started = false;

  push(chunk: string, rows: string[][]): void {
    for (const ch of chunk) {
      if (this.quoted) {
        if (ch === '"') {
          this.quoted = false;
          this.closed = true;
        } else this.field += ch;
        continue;
      }
      if (ch === '"') {
        if (this.closed) this.field += '"';
        if (this.closed || (this.field === '' && !this.started)) {
          this.quoted = true;
          this.started = true;
          this.closed = false;
          continue;
        }
        this.field += ch;
        continue;
      }
      this.closed = false;
      if (ch === ',') this.endField();
      else if (ch === '\n') this.endRow(rows);
      else if (ch !== '\r') this.field += ch;
    }
  }

  /** The last row, when the file does not end with a newline. */
  end(rows: string[][]): void {
    if (this.field !== '' || this.started || this.row.length > 0) this.endRow(rows);
  }

  private endField(): void {
    this.row.push(this.field);
    this.field = '';
    this.started = false;
  }

  private endRow(rows: string[][]): void {
    this.endField();
    if (!(this.row.length === 1 && this.row[0] === '')) rows.push(this.row);
    this.row = [];
  }
}

/** The records of a CSV file with a header row, read chunk by chunk. */
export async function* csvRecords(path: string): AsyncGenerator<DataRecord> {
  const parser = new CsvRows();
  let header: string[] | undefined;
  let line = 0;
  const toRecords = (rows: string[][]): DataRecord[] => {
    const out: DataRecord[] = [];
    for (const row of rows) {
      line++;
      if (!header) {
        header = row.map((h, i) => (i === 0 ? h.replace(/^\uFEFF/, '') : h));
        continue;
      }
      if (row.length !== header.length)
        throw new DatasetError(
          'DATASET_FORMAT',
          path,
          `${path} row ${line} has ${row.length} fields, the header ${header.length} (${header.join(', ')})`,
        );
      out.push(Object.fromEntries(header.map((h, i) => [h, row[i]])));
    }
    return out;
  };
  for await (const chunk of createReadStream(path, { encoding: 'utf8' })) {
    const rows: string[][] = [];
    parser.push(chunk as string, rows);
    yield* toRecords(rows);
  }
  const rows: string[][] = [];
  parser.end(rows);
  yield* toRecords(rows);
}
