// TensorBoard event files read back by a reader written here from the formats' specifications
// (TFRecord framing, the protobuf wire format, TensorBoard's event.proto and summary.proto), with
// no code shared with the writer: its CRC-32C is computed bit by bit, its protobuf decoder is
// generic, and the known CRC-32C check value anchors both.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { openTensorBoard } from '../../train/trackers/tensorboard.ts';

const root = mkdtempSync(join(tmpdir(), 'rtjob-tb-'));
test.after(() => rmSync(root, { recursive: true, force: true }));

/** CRC-32C bit by bit (polynomial 0x1EDC6F41, reflected 0x82F63B78). */
function crc32cBitwise(bytes: Uint8Array): number {
  let crc = ~0 >>> 0;
  for (const byte of bytes) {
    crc ^= byte;
    for (let i = 0; i < 8; i++) crc = crc & 1 ? (crc >>> 1) ^ 0x82f63b78 : crc >>> 1;
  }
  return ~crc >>> 0;
}
const mask = (crc: number): number => ((((crc >>> 15) | (crc << 17)) >>> 0) + 0xa282ead8) % 2 ** 32;

/** Every record of a TFRecord file, both CRCs checked. */
function records(file: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let at = 0;
  while (at < file.length) {
    const header = file.subarray(at, at + 8);
    const len = Number(header.readBigUInt64LE(0));
    assert.is(file.readUInt32LE(at + 8), mask(crc32cBitwise(header)), `length CRC at ${at}`);
    const data = file.subarray(at + 12, at + 12 + len);
    assert.is(file.readUInt32LE(at + 12 + len), mask(crc32cBitwise(data)), `data CRC at ${at}`);
    out.push(data);
    at += 12 + len + 4;
  }
  assert.is(at, file.length, 'no trailing bytes');
  return out;
}

type Field = { wire: number; v: bigint | Buffer };
/** A protobuf message as its fields: number -> values in order. */
function decode(buf: Buffer): Map<number, Field[]> {
  const fields = new Map<number, Field[]>();
  let i = 0;
  const varint = (): bigint => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[i++]!;
      result |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return result;
      shift += 7n;
    }
  };
  while (i < buf.length) {
    const key = Number(varint());
    const wire = key & 7;
    let v: bigint | Buffer;
    if (wire === 0) v = varint();
    else if (wire === 1) v = buf.subarray(i, (i += 8));
    else if (wire === 5) v = buf.subarray(i, (i += 4));
    else if (wire === 2) {
      const n = Number(varint());
      v = buf.subarray(i, (i += n));
    } else throw new Error(`wire type ${wire}`);
    const list = fields.get(key >>> 3) ?? [];
    list.push({ wire, v });
    fields.set(key >>> 3, list);
  }
  return fields;
}
const one = (m: Map<number, Field[]>, n: number): Field | undefined => m.get(n)?.[0];
const bytes = (f: Field | undefined): Buffer => f!.v as Buffer;
const text = (f: Field | undefined): string => bytes(f).toString('utf8');

interface ReadEvent {
  wallTime: number;
  step: number;
  fileVersion?: string;
  scalars: Record<string, number>;
  texts: Record<string, { plugin: string; strings: string[]; dtype: number; dims: number[] }>;
}

/** Events per TensorBoard's event.proto: wall_time 1 (double), step 2, file_version 3, summary 5. */
function readEvents(path: string): ReadEvent[] {
  return records(readFileSync(path)).map((r) => {
    const e = decode(r);
    const ev: ReadEvent = {
      wallTime: bytes(one(e, 1)).readDoubleLE(0),
      step: Number((one(e, 2)?.v as bigint | undefined) ?? 0n),
      scalars: {},
      texts: {},
    };
    if (e.has(3)) ev.fileVersion = text(one(e, 3));
    const summary = one(e, 5);
    if (summary)
      for (const val of decode(bytes(summary)).get(1) ?? []) {
        const value = decode(bytes(val));
        const tag = text(one(value, 1));
        if (value.has(2)) ev.scalars[tag] = bytes(one(value, 2)).readFloatLE(0);
        if (value.has(8)) {
          const meta = decode(bytes(one(value, 9)));
          const plugin = text(one(decode(bytes(one(meta, 1))), 1));
          const tensor = decode(bytes(one(value, 8)));
          const shape = decode(bytes(one(tensor, 2)));
          ev.texts[tag] = {
            plugin,
            dtype: Number(one(tensor, 1)!.v as bigint),
            dims: (shape.get(2) ?? []).map((d) =>
              Number(one(decode(d.v as Buffer), 1)!.v as bigint),
            ),
            strings: (tensor.get(8) ?? []).map((s) => (s.v as Buffer).toString('utf8')),
          };
        }
      }
    return ev;
  });
}

test('the reader is anchored: CRC-32C of "123456789" is the standard check value', () => {
  assert.is(crc32cBitwise(Buffer.from('123456789')), 0xe3069283);
});

test('an event file holds the version, the settings as text and every scalar of every step', async () => {
  const t = openTensorBoard(join(root, 'logs'), {
    name: 'run-a',
    program: 'train_ppo',
    settings: [
      { name: 'lr', value: '0.0001' },
      { name: 'use-wandb', value: '(hidden)' },
      { name: 'agent-func', value: './a|b.ts' },
    ],
  });
  assert.is(t.where(), join(root, 'logs', 'run-a'));
  t.log(1, { reward_mean: 0.25, kl: 1e-3, 'info/turns': 3 });
  t.log(2, { reward_mean: 0.5, kl: NaN });
  t.log(2, { eval_accuracy: 0.75 });
  await t.close('finished');
  const files = readdirSync(join(root, 'logs', 'run-a'));
  assert.is(files.length, 1);
  assert.match(files[0]!, /^events\.out\.tfevents\.\d{10}\./);
  const events = readEvents(join(root, 'logs', 'run-a', files[0]!));
  assert.is(events[0]!.fileVersion, 'brain.Event:2');
  assert.ok(Math.abs(events[0]!.wallTime - Date.now() / 1000) < 60);
  const config = events[1]!.texts.config!;
  assert.is(config.plugin, 'text');
  assert.is(config.dtype, 7, 'DT_STRING');
  assert.equal(config.dims, [1]);
  assert.match(config.strings[0]!, /\| --lr \| 0\.0001 \|/);
  assert.match(config.strings[0]!, /\| --use-wandb \| \(hidden\) \|/);
  assert.match(config.strings[0]!, /\| --agent-func \| \.\/a\\\|b\.ts \|/);
  const scalars = events.slice(2);
  assert.equal(
    scalars.map((e) => e.step),
    [1, 2, 2],
  );
  assert.equal(scalars[0]!.scalars, {
    reward_mean: 0.25,
    kl: Math.fround(1e-3),
    'info/turns': 3,
  });
  assert.is(scalars[1]!.scalars.reward_mean, 0.5);
  assert.ok(Number.isNaN(scalars[1]!.scalars.kl), 'a gap stays NaN');
  assert.equal(scalars[2]!.scalars, { eval_accuracy: 0.75 });
});

test('an unwritable directory is a bad flag before the run starts', () => {
  const plain = join(root, 'plain-file');
  writeFileSync(plain, 'not a directory');
  assert.throws(
    () => openTensorBoard(plain, { name: 'r', program: 'x', settings: [] }),
    (e: Error) => /^--use-tensorboard: cannot write /.test(e.message),
  );
});

test.run();
