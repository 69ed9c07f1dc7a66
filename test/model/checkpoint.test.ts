import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { loadModel, saveModel } from '../../model/checkpoint.ts';
import {
  parseSafetensors,
  SafetensorsError,
  serializeSafetensors,
} from '../../model/safetensors.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../../model/training.ts';
import { builtinTokenizerFiles } from '../../model/builtin.ts';
import { resolveConfig } from '../../model/config.ts';
import {
  maxAbsDiff,
  randomModel,
  tinyFamilyConfigs,
  tinyLlamaConfig,
} from '../fixtures/model/tiny.ts';

const dirs: string[] = [];
const tmp = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'rtjob-ckpt-'));
  dirs.push(d);
  return d;
};
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const ids = [[3, 17, 5, 39, 0, 22, 8]];
const logitsOf = (m: ReturnType<typeof randomModel>): Float32Array =>
  tf.tidy(() => m.forward(tf.tensor2d(ids, [1, 7], 'int32')).logits!.dataSync() as Float32Array);

test('save -> load gives the same logits, HF names and config fields', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig(), 21);
  const dir = tmp();
  saveModel(dir, m, { tokenizerFiles: builtinTokenizerFiles() });
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  assert.is(cfg.num_key_value_heads, 2);
  assert.is(cfg.model_type, 'llama');
  const { tensors } = parseSafetensors(readFileSync(join(dir, 'model.safetensors')));
  assert.ok(tensors['model.layers.1.self_attn.q_proj.weight']);
  assert.ok(tensors['lm_head.weight']);
  const loaded = await loadModel(dir);
  assert.is(maxAbsDiff(logitsOf(loaded.model), logitsOf(m)), 0);
  assert.ok(loaded.tokenizer);
  m.dispose();
  loaded.model.dispose();
});

test('sharded checkpoints load through model.safetensors.index.json', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig(), 24);
  const dir = tmp();
  saveModel(dir, m);
  const { tensors } = parseSafetensors(readFileSync(join(dir, 'model.safetensors')));
  const names = Object.keys(tensors);
  const half = Math.floor(names.length / 2);
  const shards = [names.slice(0, half), names.slice(half)];
  const weightMap: Record<string, string> = {};
  shards.forEach((ns, i) => {
    const file = `model-0000${i + 1}-of-00002.safetensors`;
    writeFileSync(
      join(dir, file),
      serializeSafetensors(Object.fromEntries(ns.map((n) => [n, tensors[n]!]))),
    );
    ns.forEach((n) => (weightMap[n] = file));
  });
  rmSync(join(dir, 'model.safetensors'));
  writeFileSync(
    join(dir, 'model.safetensors.index.json'),
    JSON.stringify({ metadata: {}, weight_map: weightMap }),
  );
  const loaded = await loadModel(dir);
  assert.is(maxAbsDiff(logitsOf(loaded.model), logitsOf(m)), 0);
  loaded.model.dispose();
  m.dispose();
});

test('above maxShardBytes the weights are written as HF shards with model.safetensors.index.json', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig(), 25);
  const dir = tmp();
  saveModel(dir, m); // an earlier single-file save in the same directory
  saveModel(dir, m, { maxShardBytes: 5000 });
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.safetensors'))
    .sort();
  assert.ok(files.length >= 3, files.join(' '));
  assert.ok(
    files.every((f, i) => f === `model-0000${i + 1}-of-0000${files.length}.safetensors`),
    files.join(' '),
  );
  const index = JSON.parse(readFileSync(join(dir, 'model.safetensors.index.json'), 'utf8'));
  const weights = m.exportWeights();
  assert.equal(Object.keys(index.weight_map).sort(), Object.keys(weights).sort());
  assert.is(
    index.metadata.total_size,
    Object.values(weights).reduce((a, t) => a + t.data.length * 4, 0),
  );
  for (const f of files) {
    const names = Object.keys(parseSafetensors(readFileSync(join(dir, f))).tensors);
    const bytes = names.reduce((a, n) => a + weights[n]!.data.length * 4, 0);
    assert.ok(bytes <= 5000 || names.length === 1, `${f}: ${bytes} bytes`);
    assert.ok(names.every((n) => index.weight_map[n] === f));
  }
  const loaded = await loadModel(dir);
  assert.is(maxAbsDiff(logitsOf(loaded.model), logitsOf(m)), 0);
  loaded.model.dispose();
  // Saving small again leaves one unambiguous layout.
  saveModel(dir, m);
  assert.equal(
    readdirSync(dir).filter((f) => f.includes('safetensors')),
    ['model.safetensors'],
  );
  m.dispose();
});

test('save -> load -> save keeps config.json exactly (v5 Qwen3 layout), BF16 changes only dtype', async () => {
  await initBackend('wasm');
  const raw = Object.values(tinyFamilyConfigs())[5]!;
  const m = randomModel(resolveConfig(raw), 26);
  const a = tmp();
  saveModel(a, m);
  assert.equal(JSON.parse(readFileSync(join(a, 'config.json'), 'utf8')), raw);
  const loaded = await loadModel(a);
  const b = tmp();
  saveModel(b, loaded.model, { dtype: 'bfloat16' });
  assert.equal(JSON.parse(readFileSync(join(b, 'config.json'), 'utf8')), {
    ...raw,
    dtype: 'bfloat16',
  });
  loaded.model.dispose();
  m.dispose();
});

test('safetensors: BF16 and F16 are read; corrupt and truncated files are rejected clearly', () => {
  const good = serializeSafetensors({
    a: { shape: [2, 2], data: new Float32Array([1, -2, 0.5, 3]) },
  });
  assert.equal(Array.from(parseSafetensors(good).tensors.a!.data), [1, -2, 0.5, 3]);
  const half = (dtype: string, words: number[]): Uint8Array => {
    const header = Buffer.from(
      JSON.stringify({ x: { dtype, shape: [words.length], data_offsets: [0, words.length * 2] } }),
    );
    const out = new Uint8Array(8 + header.length + words.length * 2);
    const dv = new DataView(out.buffer);
    dv.setBigUint64(0, BigInt(header.length), true);
    out.set(header, 8);
    words.forEach((w, i) => dv.setUint16(8 + header.length + i * 2, w, true));
    return out;
  };
  // bf16: 1.0 = 0x3f80, -2.5 = 0xc020; f16: 1.0 = 0x3c00, -2.5 = 0xc100, 0.000061035 = 0x0400
  assert.equal(
    Array.from(parseSafetensors(half('BF16', [0x3f80, 0xc020])).tensors.x!.data),
    [1, -2.5],
  );
  const f16 = parseSafetensors(half('F16', [0x3c00, 0xc100, 0x0400])).tensors.x!.data;
  assert.equal([f16[0], f16[1]], [1, -2.5]);
  assert.ok(Math.abs(f16[2]! - 6.1035e-5) < 1e-8);
  assert.throws(() => parseSafetensors(good.subarray(0, good.length - 3)), /truncated/);
  assert.throws(() => parseSafetensors(good.subarray(0, 5)), /truncated/);
  const badJson = good.slice();
  badJson[9] = 0x7b; // '{' inside the header
  badJson[10] = 0x7b;
  try {
    parseSafetensors(badJson, 'bad.safetensors');
    assert.unreachable('corrupt header accepted');
  } catch (e) {
    assert.instance(e, SafetensorsError);
    assert.is((e as SafetensorsError).code, 'SAFETENSORS_INVALID');
    assert.match((e as Error).message, /bad\.safetensors: header is not valid JSON/);
  }
  const huge = good.slice();
  new DataView(huge.buffer).setBigUint64(0, 1n << 40n, true);
  assert.throws(() => parseSafetensors(huge), /implausible/);
  const i64 = half('I64', [0, 0, 0, 0]);
  assert.throws(() => parseSafetensors(i64), /dtype 'I64'/);
});

test('loading a checkpoint whose tensor shapes disagree with config.json fails with the tensor name', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig(), 22);
  const dir = tmp();
  saveModel(dir, m);
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...cfg, intermediate_size: 32 }));
  let err: Error | undefined;
  try {
    await loadModel(dir);
  } catch (e) {
    err = e as Error;
  }
  assert.match(err?.message ?? '', /mlp\.gate_proj\.weight/);
  m.dispose();
});

test('trainer checkpoint resume continues exactly (weights, AdamW moments, step)', async () => {
  await initBackend('wasm');
  const batch = padBatch([
    [1, 2, 3, 4, 5, 6],
    [7, 8, 9, 10, 11, 12],
  ]);
  const mask = tf.onesLike(batch.ids).toFloat() as tf.Tensor2D;
  const opts = { lr: 1e-2, warmupSteps: 2, totalSteps: 10, weightDecay: 0.1 };
  const a = randomModel(tinyLlamaConfig(), 23);
  const ta = new ModelTrainer(a, opts);
  for (let i = 0; i < 3; i++) {
    ta.accumulate(() => maskedNllLoss(a, batch.ids, mask));
    ta.step();
  }
  const dir = tmp();
  ta.saveCheckpoint(dir, { epoch: 1 });
  ta.accumulate(() => maskedNllLoss(a, batch.ids, mask));
  ta.step();
  const b = randomModel(tinyLlamaConfig(), 99);
  const tb = new ModelTrainer(b, opts);
  const st = tb.loadCheckpoint(dir);
  assert.is(st.step, 3);
  assert.is(st.epoch, 1);
  tb.accumulate(() => maskedNllLoss(b, batch.ids, mask));
  tb.step();
  assert.ok(maxAbsDiff(logitsOf(a), logitsOf(b)) < 1e-6);
  ta.dispose();
  tb.dispose();
  a.dispose();
  b.dispose();
});

test.run();
