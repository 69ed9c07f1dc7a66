/**
 * The `torch` backend (libtorch on CPU here) computes what the `cpu` oracle computes, on the same
 * weights: logits of a padded batch, KV-cache prefill and decode, and one AdamW step (gradients,
 * global norm, updated weights), for Llama, Mistral, Qwen2 and Qwen3 fixture configs and the
 * shipped tiny checkpoint; and a checkpoint saved on torch loads on wasm (and back). Tolerances: logits 1e-4 absolute; AdamW weights 1e-4 absolute (lr 1e-3:
 * a tenth of one step; Adam's first step divides by |g|, so near-zero gradients amplify rounding); gradient norm 1e-4 relative.
 *
 * Needs libtorch (CI installs Debian's libtorch-dev); without it this fails, naming what is missing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { readConfig, readWeights, saveModel } from '../../model/checkpoint.ts';
import { resolveConfig, type LlamaConfig } from '../../model/config.ts';
import { decodeStep, prefill } from '../../model/kv-cache.ts';
import { CausalLM } from '../../model/llama.ts';
import type { NamedTensors } from '../../model/tensors.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../../model/training.ts';
import { maxAbsDiff, randomModel, tinyFamilyConfigs } from '../fixtures/model/tiny.ts';

interface Outputs {
  logits: Float32Array;
  prefill: Float32Array;
  decode: Float32Array[];
  gradNorm: number;
  loss: number;
  weights: NamedTensors;
}

const seqs = (V: number): number[][] => [
  [1, 2, 3, 4, 5, 6, 7, 8, 9],
  [11 % V, 12 % V, 13 % V],
  [20 % V, 3, 21 % V, 22 % V, 5, 6],
];

/** Everything compared, computed on the current backend from `weights`. */
function outputsOf(config: LlamaConfig, weights: NamedTensors): Outputs {
  const m = CausalLM.fromTensors(config, structuredClone(weights));
  const V = config.vocab_size;
  const batch = padBatch(seqs(V));
  const mask = tf.tensor2d(
    seqs(V).flatMap((s) => Array.from({ length: batch.T }, (_, t) => (t < s.length ? 1 : 0))),
    [seqs(V).length, batch.T],
  );
  const logits = tf.tidy(() => m.forward(batch.ids).logits!.dataSync() as Float32Array);
  const p = prefill(m, seqs(V));
  const decode: Float32Array[] = [];
  for (let step = 0; step < 3; step++) decode.push(decodeStep(m, p.cache, [4 + step, 7, 9 % V]));
  p.cache.dispose();
  const trainer = new ModelTrainer(m, { lr: 1e-3, weightDecay: 0.1, maxGradNorm: 1 });
  const loss = trainer.accumulate(() => maskedNllLoss(m, batch.ids, mask));
  const { gradNorm } = trainer.step();
  const out = { logits, prefill: p.logits, decode, gradNorm, loss, weights: m.exportWeights() };
  trainer.dispose();
  m.dispose();
  tf.dispose([batch.ids, mask]);
  return out;
}

async function parity(name: string, config: LlamaConfig, weights: NamedTensors): Promise<void> {
  await initBackend('cpu');
  const want = outputsOf(config, weights);
  await initBackend('torch');
  const before = tf.memory().numTensors;
  const got = outputsOf(config, weights);
  assert.is(tf.memory().numTensors, before, `${name}: no tensors leak on torch`);
  const d = (a: ArrayLike<number>, b: ArrayLike<number>): number => maxAbsDiff(a, b);
  assert.ok(d(got.logits, want.logits) < 1e-4, `${name}: logits ${d(got.logits, want.logits)}`);
  assert.ok(
    d(got.prefill, want.prefill) < 1e-4,
    `${name}: prefill ${d(got.prefill, want.prefill)}`,
  );
  got.decode.forEach((g, i) =>
    assert.ok(d(g, want.decode[i]!) < 1e-4, `${name}: decode step ${i} ${d(g, want.decode[i]!)}`),
  );
  assert.ok(Math.abs(got.loss - want.loss) < 1e-4, `${name}: loss ${got.loss} vs ${want.loss}`);
  const rel = Math.abs(got.gradNorm - want.gradNorm) / want.gradNorm;
  assert.ok(rel < 1e-4, `${name}: grad norm ${got.gradNorm} vs ${want.gradNorm}`);
  for (const [w, t] of Object.entries(want.weights)) {
    const diff = d(got.weights[w]!.data, t.data);
    assert.ok(diff < 1e-4, `${name}: ${w} after one AdamW step differs by ${diff}`);
  }
}

test('the torch backend starts (libtorch found and the addon built), or fails saying why', async () => {
  try {
    await initBackend('torch');
  } catch (e) {
    assert.unreachable(
      `torch backend unavailable: ${(e as Error).message} — install libtorch-dev (Debian) or set RTJOB_LIBTORCH`,
    );
  }
  assert.is(tf.getBackend(), 'torch');
});

for (const [name, raw] of Object.entries(tinyFamilyConfigs())) {
  test(`torch matches cpu: ${name}`, async () => {
    const config = resolveConfig(raw);
    await initBackend('cpu');
    const m = randomModel(config, 3);
    const weights = m.exportWeights();
    m.dispose();
    await parity(name, config, weights);
  });
}

test('torch matches cpu on the shipped rtjob-tiny-math checkpoint', async () => {
  const dir = fileURLToPath(new URL('../../model/pretrained/rtjob-tiny-math', import.meta.url));
  await parity('rtjob-tiny-math', readConfig(dir), readWeights(dir));
});

test('a checkpoint saved from torch loads on wasm with the same logits (and back)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-torch-ckpt-'));
  try {
    const config = resolveConfig(Object.values(tinyFamilyConfigs())[4]!);
    await initBackend('torch');
    const m = randomModel(config, 5);
    const ids = [[3, 1, 4, 1, 5, 9, 2, 6]];
    const logitsOf = (model: CausalLM): Float32Array =>
      tf.tidy(() => {
        const x = tf.tensor2d(ids[0]!, [1, 8], 'int32');
        return model.forward(x).logits!.dataSync() as Float32Array;
      });
    const onTorch = logitsOf(m);
    saveModel(dir, m);
    m.dispose();
    await initBackend('wasm');
    const w = CausalLM.fromTensors(readConfig(dir), readWeights(dir));
    const d = maxAbsDiff(logitsOf(w), onTorch);
    assert.ok(d < 1e-4, `wasm logits of the torch checkpoint differ by ${d}`);
    saveModel(dir, w);
    w.dispose();
    await initBackend('torch');
    const back = CausalLM.fromTensors(readConfig(dir), readWeights(dir));
    assert.ok(maxAbsDiff(logitsOf(back), onTorch) < 1e-6, 'torch → wasm → torch');
    back.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
