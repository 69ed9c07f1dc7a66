/**
 * `readRecords` on each format: parquet with snappy, gzip and zstd pages across row groups, JSONL,
 * JSON arrays, CSV with quoted fields; `maxSamples` and `columns`; and the one-line errors of a bad
 * line, a missing column or a missing file.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { asyncBufferFromFile, parquetMetadataAsync } from 'hyparquet';
import { readRecords, type ReadOptions } from '../../train/data/read.ts';
import { isRtjobError } from '../../runtime/errors.ts';
import {
  gsm8kRows,
  writeCsv,
  writeJsonl,
  writeParquet,
  type FixtureCodec,
} from '../fixtures/data/datasets.ts';

const root = mkdtempSync(join(tmpdir(), 'rtjob-data-read-'));
const rows = gsm8kRows(25);

async function all(spec: string, opts: ReadOptions = {}): Promise<Record<string, unknown>[]> {
  const out: Record<string, unknown>[] = [];
  for await (const r of readRecords(spec, opts)) out.push(r);
  return out;
}

async function rejects(p: Promise<unknown>, code: string, re: RegExp): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(isRtjobError(err, code), `expected ${code}, got ${String(err)}`);
  assert.match((err as Error).message, re);
  assert.not.match((err as Error).message, /\n/, 'one line');
}

for (const codec of ['SNAPPY', 'GZIP', 'ZSTD'] as FixtureCodec[]) {
  test(`parquet with ${codec} pages reads every row of every row group, in order`, async () => {
    const path = join(root, `gsm8k-${codec}.parquet`);
    writeParquet(path, rows, { codec, rowGroupSize: 10 });
    const meta = await parquetMetadataAsync(await asyncBufferFromFile(path));
    assert.is(meta.row_groups.length, 3);
    assert.is(meta.row_groups[0]!.columns[0]!.meta_data!.codec, codec);
    assert.equal(await all(path), rows);
  });
}

test('parquet: columns reads only those; a missing one names the columns there are', async () => {
  const path = join(root, 'cols.parquet');
  writeParquet(
    path,
    rows.map((r, i) => ({ ...r, id: i })),
  );
  const got = await all(path, { columns: ['answer'] });
  assert.equal(got[3], { answer: rows[3]!.answer });
  const ids = await all(path, { columns: ['id'], maxSamples: 3 });
  assert.equal(ids, [{ id: 0 }, { id: 1 }, { id: 2 }], 'numbers stay numbers');
  await rejects(
    all(path, { columns: ['solution'] }),
    'DATASET_COLUMN',
    /column 'solution' is not in \S+cols\.parquet \(columns: question, answer, id\)$/,
  );
});

test('parquet: a JSON column of chat messages comes back as a list of objects', async () => {
  const path = join(root, 'chat.parquet');
  const messages = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'What is 2+3?' },
  ];
  writeParquet(path, [{ context_messages: messages, answer: '5' }], { json: ['context_messages'] });
  assert.equal(await all(path), [{ context_messages: messages, answer: '5' }]);
});

test('JSONL reads by line, skips blank lines; maxSamples stops early', async () => {
  const path = join(root, 'd.jsonl');
  writeFileSync(path, `\n${rows.map((r) => JSON.stringify(r)).join('\n\n')}\n`);
  assert.equal(await all(path), rows);
  assert.equal(await all(path, { maxSamples: 4 }), rows.slice(0, 4));
  assert.equal(await all(path, { maxSamples: 0 }), []);
});

test('JSONL: a line that is not JSON, or not an object, names its line', async () => {
  const path = join(root, 'bad.jsonl');
  writeFileSync(path, '{"a":1}\n{"a":\n');
  await rejects(all(path), 'DATASET_FORMAT', /bad\.jsonl line 2 is not JSON$/);
  writeFileSync(path, '{"a":1}\n[1,2]\n');
  await rejects(all(path), 'DATASET_FORMAT', /bad\.jsonl line 2 is not a JSON object$/);
});

test('JSON: an array of objects, or JSONL under a .json name', async () => {
  const arr = join(root, 'a.json');
  writeFileSync(arr, JSON.stringify(rows.slice(0, 5), null, 2));
  assert.equal(await all(arr), rows.slice(0, 5));
  const lines = join(root, 'l.json');
  writeJsonl(lines, rows.slice(0, 3));
  assert.equal(await all(lines), rows.slice(0, 3));
});

test('CSV: quoted fields with commas, doubled quotes, newlines and CRLF line ends', async () => {
  const path = join(root, 'q.csv');
  const tricky = [
    { question: 'a, b and "c"', answer: 'line one\nline two\n#### 3' },
    { question: '', answer: '#### 0' },
    ...rows.map((r) => ({ question: r.question, answer: r.answer })),
  ];
  writeCsv(path, tricky);
  assert.equal(await all(path), tricky);
  writeFileSync(path, '\uFEFFq,a\nplain,"x ""y"""\nlast,no newline');
  assert.equal(await all(path), [
    { q: 'plain', a: 'x "y"' },
    { q: 'last', a: 'no newline' },
  ]);
});

test('CSV: a row with the wrong number of fields names the row and the header', async () => {
  const path = join(root, 'short.csv');
  writeFileSync(path, 'q,a\n1,2\n3\n');
  await rejects(
    all(path),
    'DATASET_FORMAT',
    /short\.csv row 3 has 1 fields, the header 2 \(q, a\)$/,
  );
});

test('CSV and JSONL: a missing column names the fields there are', async () => {
  const path = join(root, 'c.csv');
  writeCsv(path, [{ question: 'q', answer: 'a' }]);
  await rejects(
    all(path, { columns: ['prompt'] }),
    'DATASET_COLUMN',
    /column 'prompt' is not in \S+c\.csv \(columns: question, answer\)$/,
  );
});

test('a missing path, or a file of no dataset format, is one line', async () => {
  await rejects(
    all(join(root, 'nope.jsonl')),
    'DATASET_NOT_FOUND',
    /^no file or directory at \S+nope\.jsonl$/,
  );
  const txt = join(root, 'notes.txt');
  writeFileSync(txt, 'hello');
  await rejects(
    all(txt),
    'DATASET_FORMAT',
    /notes\.txt: not a dataset file by its name \(\.parquet, \.jsonl, \.json, \.csv\)$/,
  );
});

test.after(() => rmSync(root, { recursive: true, force: true }));
test.run();
