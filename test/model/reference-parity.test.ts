/**
 * Parity with HF transformers' equations for every supported family: the model's logits against
 * an independent float64 implementation (test/fixtures/model/reference-hf.ts) on random weights
 * large enough for errors to show. Tolerance: max |Δ logit| < 1e-4 (float32 arithmetic against
 * float64; logits are O(1..10)), for a single sequence, right- and left-padded batches,
 * KV-cache decoding, and BF16 checkpoints (against the reference on the same BF16 weights).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { loadModel, saveModel } from '../../model/checkpoint.ts';
import { resolveConfig } from '../../model/config.ts';
import { decodeStep, prefill } from '../../model/kv-cache.ts';
import { CausalLM } from '../../model/llama.ts';
import { referenceLogits } from '../fixtures/model/reference-hf.ts';
import { maxAbsDiff, randomModel, tinyFamilyConfigs } from '../fixtures/model/tiny.ts';
import type { NamedTensors } from '../../model/tensors.ts';

const tol = 1e-4;
const seqs = [
  [3, 17, 5, 39, 0, 22, 8, 8, 11, 30],
  [7, 1, 33, 2, 9, 14],
  [21, 4, 12],
];
const dirs: string[] = [];
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** The model's logits [B][T][V] for a right-padded batch (pad id 0). */
function batchLogits(m: CausalLM, batch: number[][]): number[][][] {
  const T = Math.max(...batch.map((s) => s.length));
  const V = m.config.vocab_size;
  const ids = batch.map((s) => [...s, ...new Array<number>(T - s.length).fill(0)]);
  const flat = tf.tidy(
    () =>
      m.forward(tf.tensor2d(ids, [batch.length, T], 'int32')).logits!.dataSync() as Float32Array,
  );
  return batch.map((_, b) =>
    Array.from({ length: T }, (_, t) =>
      Array.from(flat.subarray((b * T + t) * V, (b * T + t + 1) * V)),
    ),
  );
}

/** bfloat16 rounding written independently of the model's: the nearer of the two neighbours, ties to even. */
function bf16(x: number): number {
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer);
  const lower = u[0]! & 0xffff0000;
  const pick = (bits: number): number => ((u[0] = bits >>> 0), f[0]!);
  const lo = pick(lower);
  const hi = pick(lower + 0x10000);
  const dLo = Math.abs(x - lo);
  const dHi = Math.abs(hi - x);
  if (dLo !== dHi) return dLo < dHi ? lo : hi;
  return ((lower >>> 16) & 1) === 0 ? lo : hi;
}

function checkAll(m: CausalLM, raw: Record<string, unknown>, w: NamedTensors, what: string): void {
  const V = m.config.vocab_size;
  const ref = seqs.map((s) => referenceLogits(raw, w, s));
  assert.ok(Math.max(...ref[0]!.flat().map(Math.abs)) > 0.5, 'logits are not trivially small');
  // Right-padded batch: every real position of every row.
  const ours = batchLogits(m, seqs);
  seqs.forEach((s, b) => {
    const d = maxAbsDiff(ours[b]!.slice(0, s.length).flat(), ref[b]!.flat());
    assert.ok(d < tol, `${what}: row ${b} (right-padded batch) max diff ${d}`);
  });
  // Left-padded prefill, then KV-cache decoding of two more tokens per row.
  const { cache, logits } = prefill(m, seqs);
  seqs.forEach((s, b) => {
    const d = maxAbsDiff(logits.subarray(b * V, (b + 1) * V), ref[b]![s.length - 1]!);
    assert.ok(d < tol, `${what}: row ${b} prefill max diff ${d}`);
  });
  const grown = seqs.map((s) => [...s]);
  for (let step = 0; step < 2; step++) {
    const next = grown.map((s, b) => (s.length * 5 + b + step) % V);
    grown.forEach((s, b) => s.push(next[b]!));
    const inc = decodeStep(m, cache, next);
    grown.forEach((s, b) => {
      const r = referenceLogits(raw, w, s);
      const d = maxAbsDiff(inc.subarray(b * V, (b + 1) * V), r[s.length - 1]!);
      assert.ok(d < tol, `${what}: row ${b} decode step ${step} max diff ${d}`);
    });
  }
  cache.dispose();
}

let seed = 40;
for (const [name, raw] of Object.entries(tinyFamilyConfigs())) {
  const s = seed++;
  test(`${name}: F32 logits (batch, prefill, KV-cache decode) match HF's equations within ${tol}`, async () => {
    await initBackend('wasm');
    const m = randomModel(resolveConfig(raw), s);
    checkAll(m, raw, m.exportWeights(), 'wasm');
    m.dispose();
  });

  test(`${name}: a BF16 checkpoint loads and matches HF's equations on the BF16 weights`, async () => {
    await initBackend('wasm');
    const m = randomModel(resolveConfig(raw), s);
    const w = m.exportWeights();
    const dir = mkdtempSync(join(tmpdir(), 'rtjob-bf16-'));
    dirs.push(dir);
    saveModel(dir, m, { dtype: 'bfloat16' });
    m.dispose();
    const file = readFileSync(join(dir, 'model.safetensors'));
    const header = JSON.parse(
      file.subarray(8, 8 + Number(file.readBigUInt64LE(0))).toString('utf8'),
    );
    assert.is(header['model.norm.weight'].dtype, 'BF16');
    const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
    assert.is(cfg[raw.dtype !== undefined ? 'dtype' : 'torch_dtype'], 'bfloat16');
    const wBf16: NamedTensors = Object.fromEntries(
      Object.entries(w).map(([n, t]) => [
        n,
        { shape: t.shape, data: Float32Array.from(t.data, bf16) },
      ]),
    );
    const { model } = await loadModel(dir);
    const loaded = model.exportWeights();
    for (const n of Object.keys(wBf16))
      assert.is(maxAbsDiff(loaded[n]!.data, wBf16[n]!.data), 0, `${n} is the BF16 rounding`);
    checkAll(model, raw, wBf16, 'bf16');
    model.dispose();
  });
}

for (const backend of ['cpu', 'wasm'] as const) {
  test(`${backend}: the Qwen3 forward pass matches on this backend too`, async () => {
    await initBackend(backend);
    const raw = Object.values(tinyFamilyConfigs())[4]!;
    const m = randomModel(resolveConfig(raw), 77);
    const d = maxAbsDiff(
      batchLogits(m, [seqs[0]!])[0]!.flat(),
      referenceLogits(raw, m.exportWeights(), seqs[0]!).flat(),
    );
    assert.ok(d < tol, `max diff ${d}`);
    m.dispose();
  });
}

test('cpu and wasm give the same logits for the same weights (batch of 2)', async () => {
  const raw = Object.values(tinyFamilyConfigs())[0]!;
  await initBackend('cpu');
  const m = randomModel(resolveConfig(raw), 5);
  const w = m.exportWeights();
  const batch = [seqs[0]!, [...seqs[0]!].reverse()];
  const cpu = batchLogits(m, batch).flat(2);
  m.dispose();
  await initBackend('wasm');
  const m2 = CausalLM.fromTensors(resolveConfig(raw), w);
  const d = maxAbsDiff(batchLogits(m2, batch).flat(2), cpu);
  assert.ok(d < 1e-5, `cpu vs wasm max diff ${d}`);
  m2.dispose();
});

test.run();
