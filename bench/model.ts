/**
 * `npm run bench -- model`: the built-in model on the backend in use. Reports the backend's
 * matmul GFLOP/s (the ceiling), training tokens/s and achieved GFLOP/s as a fraction of it,
 * generation tokens/s at batch 1, 16 and 64 with the KV cache and without (recomputing the prefix
 * every step), and peak RSS. Writes bench/results/model.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BuiltinEngine } from '../actors/engines/builtin/engine.ts';
import { initBackend, tf } from '../actors/model/backend.ts';
import { tinyMathConfig } from '../actors/model/builtin.ts';
import { resolveConfig } from '../actors/model/config.ts';
import { recomputeLastLogits } from '../actors/model/kv-cache.ts';
import { CausalLM } from '../actors/model/llama.ts';
import { matMul } from '../actors/model/matmul.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../actors/model/training.ts';

const quick = process.env.BENCH_QUICK === '1';
const backend = await initBackend();
const config = resolveConfig(tinyMathConfig());
const model = CausalLM.init(config, { seed: 1 });
const rows: [string, string][] = [];
const result: Record<string, unknown> = { backend, params: model.numParameters };

function timeIt(fn: () => void, reps: number): number {
  fn();
  const t0 = performance.now();
  for (let i = 0; i < reps; i++) fn();
  return (performance.now() - t0) / reps;
}

// 1. matmul ceiling: the best of a square product and the model's own MLP shape
let peak = 0;
for (const [m, k, n] of [[512, 512, 512], [2048, 96, 256], [2048, 256, 96]] as const) {
  const a = tf.randomNormal([m, k]);
  const b = tf.randomNormal([k, n]);
  const ms = timeIt(() => tf.tidy(() => void tf.matMul(a, b).dataSync()), quick ? 3 : 10);
  const gf = (2 * m * k * n) / ms / 1e6;
  peak = Math.max(peak, gf);
  rows.push([`matmul [${m}x${k}]x[${k}x${n}]`, `${gf.toFixed(1)} GFLOP/s`]);
  a.dispose();
  b.dispose();
}
result.matmulGflops = peak;

// 2. training: B=32 sequences of 64 tokens, forward + backward + AdamW
{
  const B = 32;
  const T = 64;
  const seqs = Array.from({ length: B }, (_, b) => Array.from({ length: T }, (_, t) => 5 + ((b * 13 + t * 7) % 90)));
  const trainer = new ModelTrainer(model, { lr: 1e-4 });
  const batch = padBatch(seqs);
  const mask = tf.onesLike(batch.ids).toFloat() as tf.Tensor2D;
  const ms = timeIt(() => {
    trainer.accumulate(() => maskedNllLoss(model, batch.ids, mask));
    trainer.step();
  }, quick ? 2 : 5);
  const tokS = (B * T * 1000) / ms;
  // 6 flops per parameter per token (fwd + bwd) plus attention (QK^T and PV, fwd + bwd)
  const c = config;
  const flopsPerToken = 6 * model.numParameters + 6 * 2 * c.num_hidden_layers * T * c.num_attention_heads * c.head_dim;
  const achieved = (tokS * flopsPerToken) / 1e9;
  rows.push(['train tokens/s (B=32, T=64)', tokS.toFixed(0)]);
  rows.push(['train achieved GFLOP/s', `${achieved.toFixed(2)} (${((100 * achieved) / peak).toFixed(0)}% of matmul peak)`]);
  Object.assign(result, { trainTokensPerSecond: tokS, trainGflops: achieved, trainFractionOfPeak: achieved / peak });
  trainer.dispose();
  batch.ids.dispose();
  mask.dispose();
}

// 3. generation with the KV cache (engine) and without (recompute the prefix every step)
const engine = await BuiltinEngine.create({ model, eosTokenIds: [] });
const promptLen = 20;
const newTokens = quick ? 8 : 32;
const gen: Record<string, unknown> = {};
for (const B of [1, 16, 64]) {
  const prompts = Array.from({ length: B }, (_, b) => Array.from({ length: promptLen }, (_, t) => 5 + ((b + t * 3) % 90)));
  const t0 = performance.now();
  await Promise.all(prompts.map((p) => engine.generate({ inputIds: p, gconfig: { maxNewTokens: newTokens, temperature: 1 } })));
  const cached = (B * newTokens * 1000) / (performance.now() - t0);
  const t1 = performance.now();
  const seqs = prompts.map((p) => [...p]);
  for (let i = 0; i < newTokens; i++) {
    const lg = recomputeLastLogits(model, seqs);
    seqs.forEach((s, b) => s.push(lg[b * config.vocab_size]! > 0 ? 5 : 6));
  }
  const recompute = (B * newTokens * 1000) / (performance.now() - t1);
  rows.push([`generate tokens/s batch ${B} (KV cache / recompute)`, `${cached.toFixed(0)} / ${recompute.toFixed(0)} (${(cached / recompute).toFixed(1)}x)`]);
  gen[`batch${B}`] = { kvCache: cached, recompute, speedup: cached / recompute };
}
result.generation = { promptLen, newTokens, ...gen };
await engine.close();

const peakRssMiB = process.resourceUsage().maxRSS / 1024;
rows.push(['peak RSS', `${peakRssMiB.toFixed(0)} MiB`]);
result.peakRssMiB = peakRssMiB;

console.log(`model: built-in tiny Llama, ${model.numParameters} parameters, backend ${backend}\n`);
console.log('| metric | value |\n|---|---|');
for (const [k, v] of rows) console.log(`| ${k} | ${v} |`);
const out = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(out, { recursive: true });
writeFileSync(`${out}model.json`, JSON.stringify(result, null, 2) + '\n');
model.dispose();
