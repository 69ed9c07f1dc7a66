// WANDB_MODE=offline writes a run directory as the W&B SDK does (wandb/offline-run-<time>-<id>/
// run-<id>.wandb, files/config.yaml, files/wandb-metadata.json, files/wandb-summary.json) that
// `wandb sync` uploads. The file is read back here with a reader written from the formats
// (LevelDB's log with W&B's header and zlib CRC-32; protobuf wire format with the field numbers
// of the SDK's wandb_internal.proto), not with the writer's code.
import { existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { trainPpo } from '../../train/ppo/main.ts';
import { openTrackers } from '../../train/trackers/index.ts';
import { openWandbOffline } from '../../train/trackers/wandb-offline.ts';
import { WandbDatastore } from '../../train/trackers/wandb-datastore.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-wandb-offline-'));
const agent = fileURLToPath(new URL('../fixtures/agents/multi-turn-step.ts', import.meta.url));
test.after(() => rmSync(root, { recursive: true, force: true }));

const BLOCK = 32768;

/** zlib's CRC-32, bit by bit (reflected 0xEDB88320). */
function crc32(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}

interface Chunk {
  at: number;
  type: number;
  length: number;
}

/**
 * A `.wandb` file's records, checking the header, every chunk's CRC, that no chunk crosses a
 * block, that the bytes a block leaves (under 7) are zero, and FULL | FIRST MIDDLE* LAST.
 */
function readDatastore(buf: Buffer): { records: Buffer[]; chunks: Chunk[] } {
  assert.equal([...buf.subarray(0, 7)], [0x3a, 0x57, 0x26, 0x42, 0xe1, 0xbe, 0x00], 'header');
  const records: Buffer[] = [];
  const chunks: Chunk[] = [];
  let pending: Buffer[] | undefined;
  let at = 7;
  while (at < buf.length) {
    const left = BLOCK - (at % BLOCK);
    if (left < 7) {
      assert.ok(
        buf.subarray(at, at + left).every((b) => b === 0),
        `zero trailer at ${at}`,
      );
      at += left;
      continue;
    }
    const crc = buf.readUInt32LE(at);
    const length = buf.readUInt16LE(at + 4);
    const type = buf[at + 6]!;
    assert.ok(7 + length <= left, `chunk at ${at} stays in its block`);
    const data = buf.subarray(at + 7, at + 7 + length);
    assert.is(crc, crc32(buf.subarray(at + 6, at + 7 + length)), `crc at ${at}`);
    chunks.push({ at, type, length });
    if (type === 1) {
      assert.is(pending, undefined, 'FULL inside a split record');
      records.push(Buffer.from(data));
    } else if (type === 2) {
      assert.is(pending, undefined, 'FIRST inside a split record');
      pending = [Buffer.from(data)];
    } else if (type === 3 || type === 4) {
      assert.ok(pending, 'MIDDLE or LAST without FIRST');
      pending!.push(Buffer.from(data));
      if (type === 4) {
        records.push(Buffer.concat(pending!));
        pending = undefined;
      }
    } else assert.unreachable(`chunk type ${type} at ${at}`);
    at += 7 + length;
  }
  assert.is(pending, undefined, 'the file ends between records');
  return { records, chunks };
}

type Field = { field: number; wire: number; int?: bigint; bytes?: Buffer };

/** One protobuf message's fields (varint, 64-bit, length-delimited, 32-bit). */
function fields(buf: Buffer): Field[] {
  const out: Field[] = [];
  let i = 0;
  const varint = (): bigint => {
    let v = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const b = buf[i++]!;
      v |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return v;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const f = { field: key >> 3, wire: key & 7 };
    if (f.wire === 0) out.push({ ...f, int: varint() });
    else if (f.wire === 2) {
      const n = Number(varint());
      out.push({ ...f, bytes: buf.subarray(i, i + n) });
      i += n;
    } else if (f.wire === 1 || f.wire === 5) {
      out.push({ ...f, bytes: buf.subarray(i, i + (f.wire === 1 ? 8 : 4)) });
      i += f.wire === 1 ? 8 : 4;
    } else assert.unreachable(`wire type ${f.wire}`);
  }
  assert.is(i, buf.length, 'message ends on a field');
  return out;
}

const one = (fs: Field[], n: number) => fs.find((f) => f.field === n);
const str = (fs: Field[], n: number) => one(fs, n)?.bytes?.toString('utf8');
const int = (fs: Field[], n: number) => Number(one(fs, n)?.int ?? 0n);
/** `repeated {key = 1; value_json = 16}` (HistoryItem, SummaryItem, ConfigItem) as an object. */
function kv(fs: Field[], n: number): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  for (const f of fs.filter((x) => x.field === n)) {
    const item = fields(f.bytes!);
    o[str(item, 1)!] = JSON.parse(str(item, 16)!);
  }
  return o;
}

/** Record `{num = 1; oneof: history 2, summary 3, config 5, run 17, exit 18, header 21}`. */
const recordTypes: Record<number, string> = {
  2: 'history',
  3: 'summary',
  5: 'config',
  17: 'run',
  18: 'exit',
  21: 'header',
};
function decodeRecord(buf: Buffer): { num: number; type: string; body: Field[] } {
  const fs = fields(buf);
  const kind = fs.find((f) => f.field in recordTypes);
  assert.ok(kind, 'a record type');
  return { num: int(fs, 1), type: recordTypes[kind!.field]!, body: fields(kind!.bytes!) };
}

/** The one run directory under `<dir>/wandb/`, and its decoded records. */
function readRun(dir: string) {
  const runs = readdirSync(join(dir, 'wandb')).filter((n) => n.startsWith('offline-run-'));
  assert.is(runs.length, 1, runs.join(', '));
  const name = runs[0]!;
  const m = /^offline-run-(\d{8}_\d{6})-([a-z0-9]{8})$/.exec(name);
  assert.ok(m, name);
  const runDir = join(dir, 'wandb', name);
  assert.equal(readdirSync(runDir).sort(), ['files', `run-${m![2]}.wandb`]);
  const file = readDatastore(readFileSync(join(runDir, `run-${m![2]}.wandb`)));
  return { id: m![2]!, runDir, ...file, records: file.records.map(decodeRecord) };
}

test('the datastore splits records across 32 KiB blocks as LevelDB does, zero-padding the tail', () => {
  const path = join(root, 'edges.wandb');
  const log = new WandbDatastore(path);
  // 7 (file header) + 7 + 32751 leaves 3 bytes: zeros, and the next record starts a block.
  const a = Buffer.alloc(32751, 1);
  // Then 7 + 32754 leaves exactly 7: a FIRST chunk with no data, the rest in the next block.
  const b = Buffer.alloc(32754, 2);
  const c = Buffer.alloc(100_000, 3);
  const d = Buffer.alloc(0);
  for (const r of [a, b, c, d]) log.append(r);
  log.close();
  const { records, chunks } = readDatastore(readFileSync(path));
  assert.equal(records, [a, b, c, d]);
  assert.equal(
    chunks.map((k) => [k.at, k.type, k.length]),
    [
      [7, 1, 32751],
      [BLOCK, 1, 32754],
      [2 * BLOCK - 7, 2, 0],
      [2 * BLOCK, 3, 32761],
      [3 * BLOCK, 3, 32761],
      [4 * BLOCK, 3, 32761],
      [5 * BLOCK, 4, 100_000 - 3 * 32761],
      [5 * BLOCK + 7 + 100_000 - 3 * 32761, 1, 0],
    ],
  );
});

test('an offline run holds the run, its config, every row and summary, and its exit', async () => {
  const dir = join(root, 'unit');
  const lines: string[] = [];
  const t = openWandbOffline(
    { root: dir, project: 'proj', entity: 'team', group: 'g' },
    {
      name: 'run-a',
      program: 'train_ppo',
      settings: [
        { name: 'lr', value: '1e-4' },
        { name: 'packing', value: 'true' },
        { name: 'agent-func', value: './agent.ts' },
      ],
      warn: (l) => void lines.push(l),
    },
  );
  // Long enough that records cross blocks; one row wider than a block.
  const logged: Record<string, number>[] = [];
  for (let step = 1; step <= 300; step++) {
    const width = step === 150 ? 3000 : 40;
    const values: Record<string, number> = { reward_mean: step / 10, skipped: NaN };
    for (let k = 0; k < width; k++) values[`metric_${k}`] = step * 1000 + k;
    logged.push(values);
    t.log(step, values);
  }
  await t.close('failed');
  assert.equal(lines, []);
  const run = readRun(dir);
  assert.match(t.where()!, `${run.runDir} (offline; upload it with: wandb sync ${run.runDir})`);
  assert.ok(
    run.chunks.some((c) => c.type === 3),
    'a record spans whole blocks',
  );
  assert.ok(run.chunks.at(-1)!.at > 10 * BLOCK);
  const types = run.records.map((r) => r.type);
  assert.equal(types.slice(0, 2), ['header', 'run']);
  assert.equal(types.at(-1), 'exit');
  assert.equal(
    run.records.map((r) => r.num),
    run.records.map((_, i) => i + 1),
  );
  const r = run.records[1]!.body;
  assert.is(str(r, 1), run.id);
  assert.is(str(r, 2), 'team');
  assert.is(str(r, 3), 'proj');
  assert.equal(kv(fields(one(r, 4)!.bytes!), 1), {
    lr: 1e-4,
    packing: true,
    'agent-func': './agent.ts',
  });
  assert.is(str(r, 6), 'g');
  assert.is(str(r, 7), 'train_ppo');
  assert.is(str(r, 8), 'run-a');
  assert.ok(Math.abs(int(fields(one(r, 17)!.bytes!), 1) - Date.now() / 1000) < 600);
  const history = run.records.filter((x) => x.type === 'history');
  assert.is(history.length, 300);
  history.forEach((h, i) => {
    const row = kv(h.body, 1);
    assert.is(int(fields(one(h.body, 2)!.bytes!), 1), i + 1, 'HistoryStep.num');
    assert.is(row._step, i + 1);
    assert.type(row._runtime, 'number');
    assert.type(row._timestamp, 'number');
    const { skipped, ...finite } = logged[i]!;
    assert.ok(Number.isNaN(skipped) && !('skipped' in row), 'NaN is left out');
    for (const [k, v] of Object.entries(finite)) assert.is(row[k], v, k);
  });
  const summaries = run.records.filter((x) => x.type === 'summary');
  assert.is(summaries.length, 300);
  assert.is(kv(summaries.at(-1)!.body, 1).reward_mean, 30);
  assert.is(int(run.records.at(-1)!.body, 1), 1, 'a failed run exits 1');
  // The files the SDK writes beside the log.
  const files = join(run.runDir, 'files');
  assert.is(
    readFileSync(join(files, 'config.yaml'), 'utf8'),
    'lr:\n  value: 0.0001\npacking:\n  value: true\nagent-func:\n  value: "./agent.ts"\n',
  );
  const summary = JSON.parse(readFileSync(join(files, 'wandb-summary.json'), 'utf8'));
  assert.is(summary.reward_mean, 30);
  assert.is(summary.metric_0, 300_000);
  const meta = JSON.parse(readFileSync(join(files, 'wandb-metadata.json'), 'utf8'));
  assert.is(meta.program, 'train_ppo');
  assert.is(readlinkSync(join(dir, 'wandb', 'latest-run')), run.runDir.split('/').at(-1));
});

test('WANDB_MODE picks the sink as the SDK does; no key and no mode writes offline and says so', () => {
  const ctx = (env: Record<string, string>, lines: string[]) => ({
    program: 'train_ppo',
    defaultRunName: 'r',
    settings: [],
    env: { HOME: root, ...env },
    warn: (l: string) => void lines.push(l),
  });
  const lines: string[] = [];
  const off = openTrackers(
    { useWandb: 'k'.repeat(40) },
    ctx({ WANDB_MODE: 'dryrun', WANDB_DIR: join(root, 'dry') }, lines),
  );
  assert.is(off.list.length, 1);
  assert.match(off.list[0]!.where()!, join(root, 'dry', 'wandb', 'offline-run-'));
  void off.close('finished');
  assert.equal(lines, [], 'offline by choice needs no key and prints nothing more');
  assert.is(
    openTrackers({ useWandb: 'true' }, ctx({ WANDB_MODE: 'disabled' }, lines)).list.length,
    0,
  );
  const noKey = openTrackers({ useWandb: 'true' }, ctx({ WANDB_DIR: join(root, 'nokey') }, lines));
  assert.match(noKey.list[0]!.where()!, join(root, 'nokey', 'wandb', 'offline-run-'));
  void noKey.close('finished');
  assert.is(lines.length, 1);
  assert.match(
    lines[0]!,
    /^wandb: no API key \(give --use-wandb KEY, .*\); the run is written offline for `wandb sync`/,
  );
  for (const [env, message] of [
    [{ WANDB_MODE: 'online' }, /^--use-wandb: no API key/],
    [{ WANDB_MODE: 'cloud' }, /^--use-wandb: WANDB_MODE 'cloud' is none of online, offline/],
  ] as const)
    try {
      openTrackers({ useWandb: 'true' }, ctx(env, lines));
      assert.unreachable('should have failed');
    } catch (err) {
      assert.is((err as { code?: string }).code, 'BAD_FLAG');
      assert.match((err as Error).message, message);
    }
});

test('train_ppo with WANDB_MODE=offline writes every logged row for wandb sync', async () => {
  const model = await writeTinyModel(root);
  const dir = join(root, 'ppo');
  const lines: string[] = [];
  const rows: { step: number; values: Record<string, number> }[] = [];
  const s = await trainPpo(
    tinyRunArgs(model, join(root, 'ppo-out'), {
      'in-process': true,
      'max-steps': 3,
      'agent-func': agent,
      use_wandb: true,
      'wandb-project': 'proj',
      'wandb-run-name': 'ppo-offline',
    }),
    { WANDB_MODE: 'offline', WANDB_DIR: dir, HOME: root },
    {
      log: {
        line: (l) => void lines.push(l),
        metric: (step, values) => void rows.push({ step, values: { ...values } }),
      },
    },
  );
  assert.is(s.steps, 3);
  const run = readRun(dir);
  const history = run.records.filter((r) => r.type === 'history').map((r) => kv(r.body, 1));
  assert.is(history.length, rows.length);
  rows.forEach((r, i) => {
    assert.is(history[i]!._step, r.step);
    for (const [k, v] of Object.entries(r.values))
      if (Number.isFinite(v)) assert.is(history[i]![k], v, k);
  });
  const r = run.records.find((x) => x.type === 'run')!.body;
  assert.is(str(r, 3), 'proj');
  assert.is(str(r, 8), 'ppo-offline');
  assert.is(kv(fields(one(r, 4)!.bytes!), 1)['n-samples-per-prompt'], 2);
  assert.is(int(run.records.at(-1)!.body, 1), 0, 'a finished run exits 0');
  assert.ok(existsSync(join(run.runDir, 'files', 'wandb-summary.json')));
  const sync = `wandb: ${run.runDir} (offline; upload it with: wandb sync ${run.runDir})`;
  assert.ok(lines.includes(sync), lines.join('\n'));
  assert.not.ok(
    lines.some((l) => /API key|not delivered/.test(l)),
    lines.join('\n'),
  );
});

test.run();
