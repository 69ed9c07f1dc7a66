/**
 * The `torch` backend on a GPU machine, in one run (driven by `scripts/gpu-torch-bench.sh`):
 *
 * 1. parity: the tiny fixture families on `torch` (whatever device it picked: CUDA there) vs the
 *    `cpu` oracle: logits and one AdamW step, at `fp32` precision;
 * 2. a Qwen3-0.6B-shaped training step (forward + backward + AdamW, `GPU_BENCH_BATCH` ×
 *    `GPU_BENCH_SEQ` tokens, default 8 × 512) at the precision in `RTJOB_TORCH_PRECISION`;
 * 3. batched decode with the KV cache (`GPU_BENCH_DECODE_BATCH` rows, default 32, 32 new tokens).
 *
 * Writes one JSON object to the path in argv[2]. Weights are random (filled by a fast PRNG:
 * speed does not depend on the values).
 *
 * @module
 */
import { writeFileSync } from 'node:fs';
import { initBackend, tf } from '../model/backend.ts';
import { readEnv } from '../runtime/env.ts';
import { resolveConfig, type LlamaConfig } from '../model/config.ts';
import { qwen3Cut, randomWeights } from '../bench/torch-model.ts';
import { decodeStep, prefill } from '../model/kv-cache.ts';
import { CausalLM } from '../model/llama.ts';
import { buildTorchAddon, loadTorchAddon } from '../model/backends/torch/index.ts';
import type { NamedTensors } from '../model/tensors.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../model/training.ts';
import { maxAbsDiff, randomModel, tinyFamilyConfigs } from '../test/fixtures/model/tiny.ts';

if (process.argv[2] === '--build-only') {
  const { path, libtorch } = buildTorchAddon();
  console.log(
    `addon ${path} (libtorch: ${libtorch.source}, ${libtorch.libDir}, cuda ${libtorch.cuda})`,
  );
  process.exit(0);
}
const out: Record<string, unknown> = { started: new Date().toISOString() };
const outPath = process.argv[2] ?? 'gpu-torch-bench.json';
const env = (k: string, d: number): number => Number(process.env[k] ?? d);
const save = (): void => writeFileSync(outPath, JSON.stringify(out, null, 2) + '\n');

/** Logits, the loss and the weights after one AdamW step, on the current backend. */
function stepOutputs(config: LlamaConfig, weights: NamedTensors) {
  const m = CausalLM.fromTensors(config, structuredClone(weights));
  const seqs = [
    [1, 2, 3, 4, 5, 6, 7, 8],
    [9, 10, 11],
  ];
  const batch = padBatch(seqs);
  const mask = tf.tensor2d(
    seqs.flatMap((s) => Array.from({ length: batch.T }, (_, t) => (t < s.length ? 1 : 0))),
    [2, batch.T],
  );
  const logits = tf.tidy(() => m.forward(batch.ids).logits!.dataSync() as Float32Array);
  const trainer = new ModelTrainer(m, { lr: 1e-3 });
  const loss = trainer.accumulate(() => maskedNllLoss(m, batch.ids, mask));
  trainer.step();
  const w = m.exportWeights();
  trainer.dispose();
  m.dispose();
  tf.dispose([batch.ids, mask]);
  return { logits, loss, w };
}

// 1. parity, in fp32 (TF32/bf16 round differently from the cpu oracle by design)
await initBackend('torch');
const { addon, libtorch } = loadTorchAddon();
const device = addon.info().device;
addon.configure(device, 'fp32', 0);
const parity: Record<string, unknown> = {};
for (const [name, raw] of Object.entries(tinyFamilyConfigs())) {
  const config = resolveConfig(raw);
  await initBackend('cpu');
  const src = randomModel(config, 3);
  const weights = src.exportWeights();
  src.dispose();
  const want = stepOutputs(config, weights);
  await initBackend('torch');
  const got = stepOutputs(config, weights);
  let wmax = 0;
  for (const [k, t] of Object.entries(want.w))
    wmax = Math.max(wmax, maxAbsDiff(got.w[k]!.data, t.data));
  parity[name] = {
    logitsMaxAbsDiff: maxAbsDiff(got.logits, want.logits),
    lossDiff: Math.abs(got.loss - want.loss),
    weightsAfterAdamWMaxAbsDiff: wmax,
  };
}
out.parity = parity;
out.device = device;
out.libtorch = { version: addon.info().version, source: libtorch.source, dir: libtorch.libDir };
save();

// 2. a Qwen3-0.6B-shaped training step
const layers = env('GPU_BENCH_LAYERS', 28);
const config = qwen3Cut(layers);
const tensors = randomWeights(config);
await initBackend('torch');
addon.configure(device, readEnv('RTJOB_TORCH_PRECISION') ?? 'tf32', 0);
const t0 = performance.now();
const model = CausalLM.fromTensors(config, tensors, { consume: true });
out.loadSeconds = (performance.now() - t0) / 1000;
const B = env('GPU_BENCH_BATCH', 8);
const T = env('GPU_BENCH_SEQ', 512);
const ids = Array.from({ length: B }, (_, b) =>
  Array.from({ length: T }, (_, t) => (b * 7919 + t * 104729) % config.vocab_size),
);
const trainer = new ModelTrainer(model, { lr: 1e-5 });
const step = (): number => {
  const s = performance.now();
  const batch = padBatch(ids);
  const mask = tf.onesLike(batch.ids).toFloat() as tf.Tensor2D;
  trainer.accumulate(() => maskedNllLoss(model, batch.ids, mask));
  trainer.step();
  tf.dispose([batch.ids, mask]);
  return performance.now() - s;
};
const steps = env('GPU_BENCH_STEPS', 3);
step(); // warm-up
const times: number[] = [];
for (let i = 0; i < steps; i++) times.push(step());
const ms = Math.min(...times);
out.train = {
  layers,
  params: model.numParameters,
  batch: B,
  seq: T,
  precision: readEnv('RTJOB_TORCH_PRECISION') ?? 'tf32',
  msPerStep: times,
  tokensPerSecond: (B * T * 1000) / ms,
};
trainer.dispose();
save();

// 3. batched decode with the KV cache
const DB = env('GPU_BENCH_DECODE_BATCH', 32);
const prompts = Array.from({ length: DB }, (_, b) =>
  Array.from({ length: 64 }, (_, t) => (b * 31 + t * 17) % config.vocab_size),
);
const p = prefill(model, prompts);
const newTokens = 32;
decodeStep(
  model,
  p.cache,
  prompts.map(() => 5),
);
const d0 = performance.now();
for (let i = 0; i < newTokens; i++)
  decodeStep(
    model,
    p.cache,
    prompts.map((_, b) => (b + i) % 1000),
  );
out.decode = {
  batch: DB,
  newTokens,
  tokensPerSecond: (DB * newTokens * 1000) / (performance.now() - d0),
};
p.cache.dispose();
model.dispose();
out.finished = new Date().toISOString();
save();
console.log(JSON.stringify(out, null, 2));
