/**
 * `npm run bench -- zero-memory`: per-rank peak memory of one training step (forward + backward
 * + gradient reduce + AdamW) of 2 data-parallel ranks at ZeRO stages 0, 1 and 2
 * (model/zero-optimizer.ts), on `torch` with the ranks in a c10d Gloo group over loopback, each
 * rank its own process. The model is Qwen3-0.6B's shape (test/fixtures/model/configs/qwen3-0.6b.json,
 * random weights) cut to `BENCH_ZERO_LAYERS` decoder layers (default 1: 171M parameters, most of
 * them the 151,936 × 1,024 embedding), on 1 × `BENCH_ZERO_TOKENS` tokens (default 128) per rank,
 * so the step's memory is mostly weights, gradients and AdamW's moments. Each row: the ranks'
 * peak RSS (the kernel's high-water mark, reset after the model is built), RSS at the step's
 * start, AdamW state bytes per rank, the step's seconds, and `trainingMemory`'s prediction
 * (model/memory.ts, which knows the stage). `BENCH_ZERO_STAGES` (default `0,1,2`).
 * Writes bench/results/zero-memory.json.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { freePort } from '../engines/launcher.ts';

const configPath = fileURLToPath(
  new URL('../test/fixtures/model/configs/qwen3-0.6b.json', import.meta.url),
);
const mib = (b: number): number => b / 2 ** 20;
const layers = Number(process.env.BENCH_ZERO_LAYERS ?? 1);
const tokens = Number(process.env.BENCH_ZERO_TOKENS ?? 128);

interface RankRow {
  stage: number;
  rank: number;
  params: number;
  stepSeconds: number;
  peakRssMiB: number;
  rssAtStepMiB: number;
  optimizerStateMiB: number;
  predictedMiB: number;
}

async function rank(stage: 0 | 1 | 2, r: number, port: number): Promise<RankRow> {
  const { initBackend, tf } = await import('../model/backend.ts');
  await import('../model/backends/torch/collective.ts');
  const { initCollectiveGroup } = await import('../runtime/collective/group.ts');
  const { resolveConfig } = await import('../model/config.ts');
  const { CausalLM } = await import('../model/llama.ts');
  const { trainingMemory } = await import('../model/memory.ts');
  const { maskedNllLoss, ModelTrainer } = await import('../model/training.ts');
  await initBackend('torch');
  const group = await initCollectiveGroup({
    name: `zero-bench-${stage}`,
    backend: 'gloo',
    initMethod: `tcp://127.0.0.1:${port}`,
    rank: r,
    worldSize: 2,
    timeoutMs: 3_600_000,
  });
  const raw = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, unknown>;
  const config = resolveConfig({ ...raw, num_hidden_layers: layers });
  const model = CausalLM.init(config, { seed: 1 });
  const zero = stage > 0 ? { zero: { stage: stage as 1 | 2, group } } : {};
  const trainer = new ModelTrainer(model, { lr: 1e-5, ...zero });
  const ids = tf.tensor2d(
    Array.from({ length: tokens + 1 }, (_, t) => (t * 104729 + r) % config.vocab_size),
    [1, tokens + 1],
    'int32',
  );
  const mask = tf.onesLike(ids).toFloat() as typeof ids;
  (globalThis as { gc?: () => void }).gc?.();
  await group.barrier();
  writeFileSync('/proc/self/clear_refs', '5');
  const rssAtStep = process.memoryUsage().rss;
  const t0 = performance.now();
  trainer.accumulate(() => maskedNllLoss(model, ids, mask));
  if (trainer.sharded) await trainer.reduceGradientShards();
  else await trainer.reduceGradientTensors(async (flat) => void (await group.allreduce(flat)));
  await trainer.stepAsync({ scale: 0.5 });
  const stepSeconds = (performance.now() - t0) / 1000;
  const peak = Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))![1]);
  const predicted = trainingMemory(config, {
    tokens,
    attention: 'blocks',
    ...(stage > 0 ? { zero: { stage: stage as 1 | 2, worldSize: 2 } } : {}),
  }).totalBytes;
  const row = {
    stage,
    rank: r,
    params: model.numParameters,
    stepSeconds,
    peakRssMiB: peak / 1024,
    rssAtStepMiB: mib(rssAtStep),
    optimizerStateMiB: mib(trainer.optimizerStateBytes()),
    predictedMiB: mib(predicted),
  };
  group.destroy();
  return row;
}

/** One rank in its own process; resolves with its row. */
function rankProcess(stage: number, r: number, port: number): Promise<RankRow> {
  return new Promise((resolve, reject) => {
    const p = spawn(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', fileURLToPath(import.meta.url)],
      {
        env: { ...process.env, BENCH_ZERO_RANK: `${stage}:${r}:${port}`, GLOO_SOCKET_IFNAME: 'lo' },
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.on('exit', (code, signal) => {
      const line = out.split('\n').find((l) => l.startsWith('RESULT '));
      if (line) resolve(JSON.parse(line.slice(7)) as RankRow);
      else reject(new Error(`stage ${stage} rank ${r} exited ${code} ${signal ?? ''}`));
    });
  });
}

const only = process.env.BENCH_ZERO_RANK;
if (only) {
  const [stage, r, port] = only.split(':').map(Number);
  const row = await rank(stage as 0 | 1 | 2, r!, port!);
  process.stdout.write(`RESULT ${JSON.stringify(row)}\n`);
  process.exit(0);
}

const stages = (process.env.BENCH_ZERO_STAGES ?? '0,1,2').split(',').map(Number);
const rows: RankRow[] = [];
for (const stage of stages) {
  process.stderr.write(`  stage ${stage}, 2 ranks, ${layers} layers, ${tokens} tokens ...\n`);
  const port = await freePort();
  const both = await Promise.all([0, 1].map((r) => rankProcess(stage, r, port)));
  for (const row of both) process.stderr.write(`  ${JSON.stringify(row)}\n`);
  rows.push(...both);
}
const f = (x: number): string => x.toFixed(x < 10 ? 2 : 0);
console.log(
  '| ZeRO stage | params | peak RSS MiB, rank 0 / 1 | RSS at step start MiB | AdamW state MiB per rank | step s | predicted MiB (model/memory.ts) |',
);
console.log('|---:|---:|---:|---:|---:|---:|---:|');
for (const stage of stages) {
  const [a, b] = rows.filter((r) => r.stage === stage);
  if (!a || !b) continue;
  console.log(
    `| ${stage} | ${a.params} | ${f(a.peakRssMiB)} / ${f(b.peakRssMiB)} | ${f(a.rssAtStepMiB)} | ${f(a.optimizerStateMiB)} | ${f(Math.max(a.stepSeconds, b.stepSeconds))} | ${f(a.predictedMiB)} |`,
  );
}
const out = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(out, { recursive: true });
writeFileSync(`${out}zero-memory.json`, JSON.stringify({ layers, tokens, rows }, null, 2) + '\n');
