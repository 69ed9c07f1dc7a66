/**
 * The cost of a real-sized model on this machine's CPU: `BENCH_MODEL_PRETRAIN=<dir> npm run bench
 * -- model` (bench/model.ts hands over to this file). Write a random Qwen3-0.6B-shaped checkpoint
 * first with model/random-checkpoint.ts. Two phases, each in a fresh process so their peak
 * RSS is their own:
 *
 * - **infer** (`BENCH_INFER_BACKEND`, default `cpu`): load time, RSS after load, prefill tokens/s
 *   (batch 1 and 4 × 16-token prompts), KV-cache decode tokens/s (batch 1 and 4, 4 steps);
 * - **train** (`BENCH_TRAIN_BACKEND`, default `cpu`): one step of forward + backward + AdamW on
 *   1 × 16 tokens, both parts timed, and the process's peak RSS against the 16 bytes per
 *   parameter that weights, gradients and the two AdamW moments need in float32. A full-depth
 *   0.6B step needs ~12.5 GB; `random-checkpoint.ts --layers 1` writes the same shapes with one
 *   decoder layer, whose step fits in ~6 GB.
 *
 * The default is `cpu` because a 0.6B model does not fit the wasm backend: its memory is capped at
 * 4 GiB, and XNNPACK keeps a packed copy of every weight matrix it multiplies by, so the 2.4 GB
 * of float32 weights need ~4.2 GB there (measured: the heap hits 4096 MiB in the first forward
 * pass). Set `BENCH_INFER_BACKEND=wasm` for smaller models.
 *
 * Writes bench/results/model-large.json.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = resolve(process.env.BENCH_MODEL_PRETRAIN ?? '');
const phase = process.env.BENCH_MODEL_PHASE;
const mib = (b: number): number => b / 2 ** 20;
const peakRssBytes = (): number => process.resourceUsage().maxRSS * 1024;

async function infer(): Promise<Record<string, number | string>> {
  const { initBackend } = await import('../model/backend.ts');
  const { loadModel } = await import('../model/checkpoint.ts');
  const { decodeStep, prefill } = await import('../model/kv-cache.ts');
  const backend = await initBackend((process.env.BENCH_INFER_BACKEND ?? 'cpu') as 'cpu' | 'wasm');
  const t0 = performance.now();
  const { model } = await loadModel(dir);
  const loadS = (performance.now() - t0) / 1000;
  const out: Record<string, number | string> = new Proxy({} as Record<string, number | string>, {
    // Each number is also logged as it is measured, so a run stopped early still reports.
    set: (o, k, v) => (
      (o[k as string] = v),
      process.stderr.write(`  infer ${String(k)} = ${v}\n`),
      true
    ),
  });
  Object.assign(out, {
    backend,
    params: model.numParameters,
    loadSeconds: loadS,
    rssAfterLoadMiB: mib(process.memoryUsage().rss),
  });
  const V = model.config.vocab_size;
  const promptLen = 16;
  for (const B of (process.env.BENCH_INFER_BATCHES ?? '1,4').split(',').map(Number)) {
    const prompts = Array.from({ length: B }, (_, b) =>
      Array.from({ length: promptLen }, (_, t) => (b * 7919 + t * 104729) % V),
    );
    const p0 = performance.now();
    const { cache } = prefill(model, prompts);
    const prefillMs = performance.now() - p0;
    const steps = 4;
    const d0 = performance.now();
    for (let s = 0; s < steps; s++)
      decodeStep(
        model,
        cache,
        prompts.map((p) => p[s + 1]!),
      );
    const decodeMs = performance.now() - d0;
    cache.dispose();
    out[`prefillTokensPerSecond_b${B}`] = (B * promptLen * 1000) / prefillMs;
    out[`decodeTokensPerSecond_b${B}`] = (B * steps * 1000) / decodeMs;
  }
  out.peakRssMiB = mib(peakRssBytes());
  return out;
}

async function train(): Promise<Record<string, number | string>> {
  const { initBackend, tf } = await import('../model/backend.ts');
  const { loadModel } = await import('../model/checkpoint.ts');
  const { maskedNllLoss, ModelTrainer, padBatch } = await import('../model/training.ts');
  const backend = await initBackend((process.env.BENCH_TRAIN_BACKEND ?? 'cpu') as 'cpu' | 'wasm');
  const mark = (what: string): void =>
    void process.stderr.write(
      `  train ${what}: rss ${mib(process.memoryUsage().rss).toFixed(0)} MiB, tensors ${mib(tf.memory().numBytes).toFixed(0)} MiB\n`,
    );
  const { model } = await loadModel(dir);
  const rssLoaded = process.memoryUsage().rss;
  mark('loaded');
  const trainer = new ModelTrainer(model, { lr: 1e-5 });
  mark('AdamW moments allocated');
  const T = 16;
  const batch = padBatch([
    Array.from({ length: T }, (_, t) => (t * 104729) % model.config.vocab_size),
  ]);
  const mask = tf.onesLike(batch.ids).toFloat();
  const t0 = performance.now();
  trainer.accumulate(() => maskedNllLoss(model, batch.ids, mask));
  const t1 = performance.now();
  const peakBackward = peakRssBytes();
  mark('forward + backward');
  const { gradNorm } = trainer.step();
  const t2 = performance.now();
  const params = model.numParameters;
  const peak = peakRssBytes();
  return {
    backend,
    params,
    layers: model.config.num_hidden_layers,
    tokens: T,
    stepSeconds: (t2 - t0) / 1000,
    forwardBackwardSeconds: (t1 - t0) / 1000,
    adamwSeconds: (t2 - t1) / 1000,
    gradNorm,
    rssAfterLoadMiB: mib(rssLoaded),
    peakRssForwardBackwardMiB: mib(peakBackward),
    peakRssMiB: mib(peak),
    // weights, gradients and AdamW's m and v, float32 each
    neededMiB: mib(16 * params),
    overheadMiB: mib(peak - 16 * params),
    // after the step: weights and both moments (the gradients are freed)
    tensorsAfterStepMiB: mib(tf.memory().numBytes),
  };
}

if (phase === 'infer' || phase === 'train') {
  const r = phase === 'infer' ? await infer() : await train();
  process.stdout.write(`RESULT ${JSON.stringify(r)}\n`);
  process.exit(0);
}

if (!process.env.BENCH_MODEL_PRETRAIN)
  throw new Error('set BENCH_MODEL_PRETRAIN to a model directory');
const result: Record<string, unknown> = { dir };
for (const p of (process.env.BENCH_MODEL_PHASES ?? 'infer,train').split(',')) {
  const r = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
    env: { ...process.env, BENCH_MODEL_PHASE: p },
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 1 << 24,
  });
  const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
  result[p] = line
    ? JSON.parse(line.slice(7))
    : { failed: `exit ${r.status} ${r.signal ?? ''}`.trim() };
}
console.log('| phase | metric | value |\n|---|---|---|');
for (const [p, v] of Object.entries(result)) {
  if (typeof v !== 'object' || v === null) continue;
  for (const [k, x] of Object.entries(v))
    console.log(`| ${p} | ${k} | ${typeof x === 'number' ? Number(x.toPrecision(4)) : x} |`);
}
const outDir = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(outDir, { recursive: true });
writeFileSync(resolve(outDir, 'model-large.json'), JSON.stringify(result, null, 2) + '\n');
