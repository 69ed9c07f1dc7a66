/**
 * `npm run bench -- datasets`: the dataset reader's memory on a large parquet file. Writes a
 * GSM8K-shaped file of `BENCH_DATA_MB` MB (default 1024; snappy pages, row groups of 20,000 rows,
 * text of random words so pages do not compress away) with hyparquet-writer's streaming writer,
 * then reads it with `readRecords` in a child process, which counts the records and reports its
 * peak RSS; a second child that reads nothing gives the process's own baseline. Writes
 * bench/results/datasets.json.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fileWriter, ParquetWriter, schemaFromColumnData } from 'hyparquet-writer';
import { seededRandom } from '../model/prng.ts';
import { readRecords } from '../train/data/read.ts';

const mode = process.argv[2];
if (mode === 'read' || mode === 'idle') {
  const t0 = performance.now();
  let n = 0;
  let chars = 0;
  if (mode === 'read')
    for await (const r of readRecords(process.argv[3]!)) {
      n++;
      chars += String(r['question']).length;
    }
  const rssMiB = process.resourceUsage().maxRSS / 1024;
  console.log(JSON.stringify({ records: n, chars, s: (performance.now() - t0) / 1000, rssMiB }));
  process.exit(0);
}

const targetMB = Number(process.env.BENCH_DATA_MB ?? 1024);
const path = join(tmpdir(), `rtjob-bench-data-${targetMB}mb.parquet`);
const groupRows = 20000;
if (!existsSync(path)) {
  const rand = seededRandom(1);
  const words = Array.from({ length: 4096 }, (_, i) =>
    (i * 2654435761).toString(36).slice(0, 3 + (i % 6)),
  );
  const text = (n: number): string =>
    Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(' ');
  const group = (): { name: string; data: string[]; type: 'STRING' }[] => {
    const q = Array.from({ length: groupRows }, () => text(30));
    const a = q.map(() => `${text(40)}\n#### ${Math.floor(rand() * 1000)}`);
    return [
      { name: 'question', data: q, type: 'STRING' },
      { name: 'answer', data: a, type: 'STRING' },
    ];
  };
  const first = group();
  const writer = new ParquetWriter({
    writer: fileWriter(path),
    schema: schemaFromColumnData({ columnData: first }),
  });
  await writer.write({ columnData: first, rowGroupSize: groupRows });
  while (statSync(path).size < targetMB * 1e6)
    await writer.write({ columnData: group(), rowGroupSize: groupRows });
  await writer.finish();
}
const sizeMB = statSync(path).size / 1e6;

const self = fileURLToPath(import.meta.url);
const child = (args: string[]): { records: number; s: number; rssMiB: number } => {
  const r = spawnSync(
    process.execPath,
    ['--conditions=rtjob-source', '--import', 'tsx', self, ...args],
    {
      encoding: 'utf8',
    },
  );
  if (r.status !== 0) throw new Error(r.stderr);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as {
    records: number;
    s: number;
    rssMiB: number;
  };
};
const idle = child(['idle']);
const read = child(['read', path]);
const rows = [
  ['parquet file (snappy, 20,000-row groups)', `${sizeMB.toFixed(0)} MB, ${read.records} records`],
  ['read time, records/s', `${read.s.toFixed(1)} s, ${Math.round(read.records / read.s)}`],
  [
    'peak RSS reading it all / an idle reader process',
    `${read.rssMiB.toFixed(0)} / ${idle.rssMiB.toFixed(0)} MiB`,
  ],
];
for (const [k, v] of rows) console.log(`| ${k!.padEnd(50)} | ${v!.padEnd(28)} |`);
const out = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(out, { recursive: true });
writeFileSync(join(out, 'datasets.json'), JSON.stringify({ sizeMB, idle, read }, null, 2) + '\n');
