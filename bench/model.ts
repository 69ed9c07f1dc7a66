/**
 * `npm run bench -- model`: the built-in model on the backend in use. Reports the backend's
 * matmul GFLOP/s (the ceiling), training tokens/s and achieved GFLOP/s as a fraction of it,
 * training tokens/s at the shapes the shipped model trains on (SFT: 32 sequences of 35-55
 * tokens; RL: 64 of 55-85 in micro-batches of 16), generation tokens/s at batch 1, 16 and 64 with
 * the KV cache and without (recomputing the prefix every step) and at the RL shape (64 requests x
 * 48 new tokens), and peak RSS. Writes bench/results/model.json.
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

// 3. training at the shapes the shipped model meets: variable lengths, right-padded per micro-batch
{
  const trainer = new ModelTrainer(model, { lr: 1e-5 });
  let state = 7;
  const rand = (): number => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32);
  for (const [name, B, lo, hi, micro] of [['SFT', 32, 35, 56, 32], ['RL', 64, 55, 86, 16]] as const) {
    const seqs = Array.from({ length: B }, () => Array.from({ length: lo + Math.floor(rand() * (hi - lo)) }, () => 5 + Math.floor(rand() * 95)));
    const tokens = seqs.reduce((n, x) => n + x.length, 0);
    const ms = timeIt(() => {
      for (let m = 0; m < B; m += micro) {
        const mb = seqs.slice(m, m + micro);
        trainer.accumulate(() => {
          const { ids, T } = padBatch(mb);
          const mask = tf.tensor2d(mb.flatMap((x) => Array.from({ length: T }, (_, t) => (t < x.length ? 1 : 0))), [mb.length, T]);
          return maskedNllLoss(model, ids, mask);
        });
      }
      trainer.step();
    }, quick ? 1 : 3);
    const tokS = (tokens * 1000) / ms;
    rows.push([`train tokens/s, ${name} shape (${B} x ${lo}-${hi - 1} tokens, micro-batch ${micro})`, `${tokS.toFixed(0)} (${ms.toFixed(0)} ms/step)`]);
    result[`train${name}`] = { tokensPerSecond: tokS, msPerStep: ms, sequences: B, tokens, microBatch: micro };
  }
  trainer.dispose();
}

// 4. generation with the KV cache (engine) and without (recompute the prefix every step)
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
{
  // The RL loop's shape: 64 episodes at once, prompts of 18-29 tokens, up to 48 new tokens.
  const prompts = Array.from({ length: 64 }, (_, b) => Array.from({ length: 18 + (b % 12) }, (_, t) => 5 + ((b * 7 + t * 3) % 90)));
  const gen64 = async (): Promise<number> => {
    const t0 = performance.now();
    await Promise.all(prompts.map((p) => engine.generate({ inputIds: p, gconfig: { maxNewTokens: 48, temperature: 1 } })));
    return performance.now() - t0;
  };
  await gen64();
  const times: number[] = [];
  for (let i = 0; i < (quick ? 1 : 3); i++) times.push(await gen64());
  const ms = Math.min(...times);
  const tokS = (64 * 48 * 1000) / ms;
  rows.push(['generate tokens/s, RL shape (64 requests x 48 new tokens, KV cache)', `${tokS.toFixed(0)} (${ms.toFixed(0)} ms per batch)`]);
  gen.rlShape = { tokensPerSecond: tokS, msPerBatch: ms };
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
