/**
 * `npm run bench -- engines`: the builtin engine against the llama.cpp engine on the same
 * checkpoint, in the same process, alternating: the RL generation shape (64 requests × 48 new
 * tokens at temperature 1, 20-token prompts) and one request of 48 tokens, as tokens per wall
 * second and per CPU-second of the process (llama.cpp's threads included), and the time one
 * weight sync takes (the trainer's tensors into the engine). llama.cpp runs one thread
 * (`BENCH_ENGINES_THREADS`) and serves f32, bf16 and q8_0 GGUFs. The shipped tiny model by
 * default; `BENCH_ENGINES_PRETRAIN=<dir>` measures that checkpoint (e.g. a Qwen3-0.6B-shaped one
 * from model/random-checkpoint.ts), with `BENCH_ENGINES_REQUESTS` requests (default 64) of
 * `BENCH_ENGINES_NEW_TOKENS` (48), the GGUF dtypes of `BENCH_ENGINES_DTYPES` (f32,bf16,q8_0), and
 * the builtin engine skipped when `BENCH_ENGINES_BUILTIN=0`. Writes bench/results/engines.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BuiltinEngine } from '../engines/builtin/engine.ts';
import { LlamaCppEngine } from '../engines/llamacpp/index.ts';
import type { InferenceEngine } from '../engines/types.ts';
import { initBackend } from '../model/backend.ts';
import { readConfig, readWeights } from '../model/checkpoint.ts';
import type { GgufDtype } from '../model/gguf/index.ts';

const pretrain =
  process.env.BENCH_ENGINES_PRETRAIN ??
  fileURLToPath(new URL('../model/pretrained/rtjob-tiny-math', import.meta.url));
const requests = Number(process.env.BENCH_ENGINES_REQUESTS ?? 64);
const threads = Number(process.env.BENCH_ENGINES_THREADS ?? 1);
const withBuiltin = process.env.BENCH_ENGINES_BUILTIN !== '0';
const reps = process.env.BENCH_QUICK === '1' ? 1 : 2;
const newTokens = Number(process.env.BENCH_ENGINES_NEW_TOKENS ?? 48);
const promptLen = 20;
const backend = await initBackend();
const config = readConfig(pretrain);
const V = config.vocab_size;
const prompts = Array.from({ length: requests }, (_, i) =>
  Array.from({ length: promptLen }, (_, k) => 3 + ((i * 31 + k * 7) % (Math.min(V, 100) - 3))),
);

/** Wall ms and process CPU ms of `fn`. */
async function measure(fn: () => Promise<unknown>): Promise<{ wallMs: number; cpuMs: number }> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  const c = process.cpuUsage(c0);
  return { wallMs: performance.now() - t0, cpuMs: (c.user + c.system) / 1000 };
}

async function generateAll(e: InferenceEngine, n: number): Promise<number> {
  const rs = await Promise.all(
    prompts
      .slice(0, n)
      .map((inputIds, i) =>
        e.generate({ inputIds, gconfig: { maxNewTokens: newTokens, seed: i } }),
      ),
  );
  return rs.reduce((a, r) => a + r.outputTokens.length, 0);
}

interface Row {
  engine: string;
  rl: { tokens: number; wallMs: number; cpuMs: number };
  single: { tokens: number; wallMs: number; cpuMs: number };
  syncMs: number;
}

async function bench(name: string, e: InferenceEngine): Promise<Row> {
  await e.generate({ inputIds: prompts[0]!, gconfig: { maxNewTokens: 4 } }); // warm-up
  let best: Row | undefined;
  const weights = readWeights(pretrain);
  for (let r = 0; r < reps; r++) {
    let tokens = 0;
    const rl = await measure(async () => (tokens = await generateAll(e, requests)));
    let one = 0;
    const single = await measure(async () => (one = await generateAll(e, 1)));
    const sync = await measure(() => e.updateWeights({ kind: 'tensors', tensors: weights }, r + 1));
    const row = {
      engine: name,
      rl: { tokens, ...rl },
      single: { tokens: one, ...single },
      syncMs: sync.wallMs,
    };
    if (!best || row.rl.wallMs < best.rl.wallMs) best = row;
  }
  return best!;
}

const rows: Row[] = [];
const missing = await import('node-llama-cpp').then(
  () => undefined,
  (e: unknown) => String(e).split('\n')[0],
);
if (missing) {
  console.log(`engines: skipped, node-llama-cpp does not load (${missing})`);
  process.exit(0);
}
if (withBuiltin) {
  const b = await BuiltinEngine.create({ modelPath: pretrain, eosTokenIds: [] });
  rows.push(await bench(`builtin (${backend})`, b));
  await b.close();
}
for (const dtype of (process.env.BENCH_ENGINES_DTYPES ?? 'f32,bf16,q8_0').split(
  ',',
) as GgufDtype[]) {
  const l = await LlamaCppEngine.create({
    modelPath: pretrain,
    dtype,
    threads,
    eosTokenIds: [],
    maxSequences: Math.min(requests, 64),
    contextSize: promptLen + newTokens + 8,
  });
  rows.push(await bench(`llamacpp ${dtype} (${l.weightSync}, ${threads} thread)`, l));
  await l.close();
}

const perCpu = (x: { tokens: number; cpuMs: number }) => (x.tokens * 1000) / x.cpuMs;
const perWall = (x: { tokens: number; wallMs: number }) => (x.tokens * 1000) / x.wallMs;
const base = rows[0]!;
console.log(
  `engines: ${pretrain} (vocab ${V}, ${config.num_hidden_layers} layers, hidden ${config.hidden_size}), ` +
    `${requests} requests × ${newTokens} new tokens, prompts of ${promptLen}\n`,
);
console.log(
  '| engine | RL shape tok/s wall | tok per CPU-s | vs first row (CPU-s) | batch 1 tok/s wall | tok per CPU-s | weight sync ms |',
);
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(
    `| ${r.engine} | ${perWall(r.rl).toFixed(0)} | ${perCpu(r.rl).toFixed(0)} | ${(perCpu(r.rl) / perCpu(base.rl)).toFixed(2)}x | ` +
      `${perWall(r.single).toFixed(0)} | ${perCpu(r.single).toFixed(0)} | ${r.syncMs.toFixed(1)} |`,
  );
}
const out = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(out, { recursive: true });
writeFileSync(
  `${out}${process.env.BENCH_ENGINES_PRETRAIN ? 'engines-pretrain' : 'engines'}.json`,
  JSON.stringify({ pretrain, requests, newTokens, promptLen, threads, backend, rows }, null, 2) +
    '\n',
);
