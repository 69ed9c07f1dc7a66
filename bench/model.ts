/**
 * `npm run bench -- model`: the built-in model on the backend in use. Reports the backend's
 * matmul GFLOP/s (the ceiling), training tokens/s and achieved GFLOP/s as a fraction of it,
 * training tokens/s at the shapes the shipped model trains on (SFT: 32 sequences of 35-55
 * tokens; RL: 64 of 55-85 in micro-batches of 16), generation tokens/s at batch 1, 16 and 64 with
 * the KV cache and without (recomputing the prefix every step) and at the RL shape (64 requests x
 * 48 new tokens), and peak RSS. With `BENCH_MODEL_BASELINE=<dir>` (a checkout of an older
 * commit) it also runs that tree's model on the same steps, interleaved, for a before/after
 * measured under the same load. Writes bench/results/model.json. With `BENCH_MODEL_PRETRAIN=<dir>`
 * it measures that checkpoint instead (bench/model-large.ts). Last, the backends side by side
 * (`BENCH_MODEL_BACKENDS`, default `wasm,torch`; bench/model-backends.ts).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { BuiltinEngine } from '../engines/builtin/engine.ts';
import { type BackendName, initBackend, tf } from '../model/backend.ts';
import { tinyMathConfig } from '../model/builtin.ts';
import { resolveConfig } from '../model/config.ts';
import { recomputeLastLogits } from '../model/kv-cache.ts';
import { CausalLM } from '../model/llama.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../model/training.ts';
import { useWasmKernelOverrides } from '../model/wasm-kernels.ts';
import { compareBackends } from './model-backends.ts';

if (process.env.BENCH_MODEL_PRETRAIN) {
  // A real-sized checkpoint: its own benchmark (load, prefill, decode, a training step, memory).
  await import('./model-large.ts');
  process.exit(0);
}
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
for (const [m, k, n] of [
  [512, 512, 512],
  [2048, 96, 256],
  [2048, 256, 96],
] as const) {
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
  const seqs = Array.from({ length: B }, (_, b) =>
    Array.from({ length: T }, (_, t) => 5 + ((b * 13 + t * 7) % 90)),
  );
  const trainer = new ModelTrainer(model, { lr: 1e-4 });
  const batch = padBatch(seqs);
  const mask = tf.onesLike(batch.ids).toFloat() as tf.Tensor2D;
  const ms = timeIt(
    () => {
      trainer.accumulate(() => maskedNllLoss(model, batch.ids, mask));
      trainer.step();
    },
    quick ? 2 : 5,
  );
  const tokS = (B * T * 1000) / ms;
  // 6 flops per parameter per token (fwd + bwd) plus attention (QK^T and PV, fwd + bwd)
  const c = config;
  const flopsPerToken =
    6 * model.numParameters + 6 * 2 * c.num_hidden_layers * T * c.num_attention_heads * c.head_dim;
  const achieved = (tokS * flopsPerToken) / 1e9;
  rows.push(['train tokens/s (B=32, T=64)', tokS.toFixed(0)]);
  rows.push([
    'train achieved GFLOP/s',
    `${achieved.toFixed(2)} (${((100 * achieved) / peak).toFixed(0)}% of matmul peak)`,
  ]);
  Object.assign(result, {
    trainTokensPerSecond: tokS,
    trainGflops: achieved,
    trainFractionOfPeak: achieved / peak,
  });
  trainer.dispose();
  batch.ids.dispose();
  mask.dispose();
}

// 3. training at the shapes the shipped model meets: variable lengths, right-padded per micro-batch
type Model = Pick<CausalLM, 'config' | 'params' | 'forward' | 'logitsFromHidden' | 'values'>;
const trainShapes = [
  ['SFT', 32, 35, 56, 32],
  ['RL', 64, 55, 86, 16],
] as const;
const shapeSeqs = trainShapes.map(([, B, lo, hi]) => {
  let state = 7 + B;
  const rand = (): number => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
  return Array.from({ length: B }, () =>
    Array.from({ length: lo + Math.floor(rand() * (hi - lo)) }, () => 5 + Math.floor(rand() * 95)),
  );
});
/** One optimizer step over shape `s` (micro-batches, masked NLL, AdamW). */
function shapeStep(trainer: ModelTrainer, s: number): void {
  const micro = trainShapes[s]![4];
  const seqs = shapeSeqs[s]!;
  const m = trainer.model;
  for (let o = 0; o < seqs.length; o += micro) {
    const mb = seqs.slice(o, o + micro);
    trainer.accumulate(() => {
      const { ids, T } = padBatch(mb);
      const mask = tf.tensor2d(
        mb.flatMap((x) => Array.from({ length: T }, (_, t) => (t < x.length ? 1 : 0))),
        [mb.length, T],
      );
      return maskedNllLoss(m, ids, mask);
    });
  }
  trainer.step();
}
const shapeTokens = (s: number): number => shapeSeqs[s]!.reduce((n, x) => n + x.length, 0);
{
  const trainer = new ModelTrainer(model, { lr: 1e-5 });
  trainShapes.forEach(([name, B, lo, hi, micro], s) => {
    const ms = timeIt(() => shapeStep(trainer, s), quick ? 1 : 3);
    const tokS = (shapeTokens(s) * 1000) / ms;
    rows.push([
      `train tokens/s, ${name} shape (${B} x ${lo}-${hi - 1} tokens, micro-batch ${micro})`,
      `${tokS.toFixed(0)} (${ms.toFixed(0)} ms/step)`,
    ]);
    result[`train${name}`] = {
      tokensPerSecond: tokS,
      msPerStep: ms,
      sequences: B,
      tokens: shapeTokens(s),
      microBatch: micro,
    };
  });
  trainer.dispose();
}

// The RL loop's generation shape: 64 episodes at once, prompts of 18-29 tokens, 48 new tokens.
const rlPrompts = Array.from({ length: 64 }, (_, b) =>
  Array.from({ length: 18 + (b % 12) }, (_, t) => 5 + ((b * 7 + t * 3) % 90)),
);
async function generateRlShape(e: BuiltinEngine): Promise<number> {
  const t0 = performance.now();
  await Promise.all(
    rlPrompts.map((p) =>
      e.generate({ inputIds: p, gconfig: { maxNewTokens: 48, temperature: 1 } }),
    ),
  );
  return performance.now() - t0;
}

// 4. generation with the KV cache (engine) and without (recompute the prefix every step)
const engine = await BuiltinEngine.create({ model, eosTokenIds: [] });
const promptLen = 20;
const newTokens = quick ? 8 : 32;
const gen: Record<string, unknown> = {};
for (const B of [1, 16, 64]) {
  const prompts = Array.from({ length: B }, (_, b) =>
    Array.from({ length: promptLen }, (_, t) => 5 + ((b + t * 3) % 90)),
  );
  const t0 = performance.now();
  await Promise.all(
    prompts.map((p) =>
      engine.generate({ inputIds: p, gconfig: { maxNewTokens: newTokens, temperature: 1 } }),
    ),
  );
  const cached = (B * newTokens * 1000) / (performance.now() - t0);
  const t1 = performance.now();
  const seqs = prompts.map((p) => [...p]);
  for (let i = 0; i < newTokens; i++) {
    const lg = recomputeLastLogits(model, seqs);
    seqs.forEach((s, b) => s.push(lg[b * config.vocab_size]! > 0 ? 5 : 6));
  }
  const recompute = (B * newTokens * 1000) / (performance.now() - t1);
  rows.push([
    `generate tokens/s batch ${B} (KV cache / recompute)`,
    `${cached.toFixed(0)} / ${recompute.toFixed(0)} (${(cached / recompute).toFixed(1)}x)`,
  ]);
  gen[`batch${B}`] = { kvCache: cached, recompute, speedup: cached / recompute };
}
{
  await generateRlShape(engine);
  const times: number[] = [];
  for (let i = 0; i < (quick ? 1 : 3); i++) times.push(await generateRlShape(engine));
  const ms = Math.min(...times);
  const tokS = (64 * 48 * 1000) / ms;
  rows.push([
    'generate tokens/s, RL shape (64 requests x 48 new tokens, KV cache)',
    `${tokS.toFixed(0)} (${ms.toFixed(0)} ms per batch)`,
  ]);
  gen.rlShape = { tokensPerSecond: tokS, msPerBatch: ms };
}
result.generation = { promptLen, newTokens, ...gen };
await engine.close();

// 5. before/after in one process. BENCH_MODEL_BASELINE=<dir> names a checkout of an older
// commit: its model code runs the same steps (with the backend's own kernels), interleaved with
// this tree's, so both see the same load on a shared machine; the medians are compared.
const baselineDir = process.env.BENCH_MODEL_BASELINE;
if (baselineDir) {
  const url = pathToFileURL(resolve(baselineDir, 'model/llama.ts')).href;
  const Base = ((await import(url)) as { CausalLM: typeof CausalLM }).CausalLM;
  // Both trees number their models' TF.js variables from 1; skip names this process already holds.
  let base: CausalLM | undefined;
  for (let tries = 0; !base; tries++) {
    try {
      base = Base.fromTensors(config, model.exportWeights());
    } catch (e) {
      if (tries > 20 || !/already registered/.test(String(e))) throw e;
    }
  }
  const reps = quick ? 2 : 5;
  const median = (xs: number[]): number =>
    [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const compare = async (
    label: string,
    work: number,
    run: (m: Model, isBase: boolean) => Promise<number> | number,
  ): Promise<void> => {
    const ms = { base: [] as number[], now: [] as number[] };
    for (let r = 0; r < reps; r++) {
      for (const isBase of [true, false]) {
        useWasmKernelOverrides(!isBase);
        ms[isBase ? 'base' : 'now'].push(await run(isBase ? base! : model, isBase));
      }
    }
    useWasmKernelOverrides(true);
    const [b, n] = [median(ms.base), median(ms.now)];
    rows.push([
      `${label}: baseline / this tree (same run, interleaved)`,
      `${((work * 1000) / b).toFixed(0)} / ${((work * 1000) / n).toFixed(0)} tok/s (${(b / n).toFixed(2)}x)`,
    ]);
    (result.baseline as Record<string, unknown>)[label] = { baselineMs: b, ms: n, speedup: b / n };
  };
  result.baseline = { dir: baselineDir };
  const trainers = new Map<Model, ModelTrainer>();
  const trainerOf = (m: Model): ModelTrainer => {
    if (!trainers.has(m)) trainers.set(m, new ModelTrainer(m as CausalLM, { lr: 1e-5 }));
    return trainers.get(m)!;
  };
  for (const [s, [name]] of trainShapes.entries()) {
    await compare(`train ${name} shape`, shapeTokens(s), (m) => {
      shapeStep(trainerOf(m), s);
      const t0 = performance.now();
      shapeStep(trainerOf(m), s);
      return performance.now() - t0;
    });
  }
  trainers.forEach((t) => t.dispose());
  const engines = new Map<Model, BuiltinEngine>();
  for (const m of [base, model])
    engines.set(m, await BuiltinEngine.create({ model: m, eosTokenIds: [] }));
  await compare('generate RL shape', 64 * 48, async (m) => {
    await generateRlShape(engines.get(m)!);
    return generateRlShape(engines.get(m)!);
  });
  for (const e of engines.values()) await e.close();
  base.dispose();
}

// 6. the backends side by side (wasm vs torch on CPU here), same weights, interleaved rounds
{
  const backends = (process.env.BENCH_MODEL_BACKENDS ?? 'wasm,torch').split(',') as BackendName[];
  const side = await compareBackends(config, model.exportWeights(), { quick, backends });
  rows.push(...side.rows);
  result.backends = side.result;
}

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
