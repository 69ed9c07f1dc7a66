/**
 * `npm run bench -- train-memory`: peak memory and tokens/s of one training step (forward +
 * backward + AdamW) of a Qwen3-0.6B-shaped model (`test/fixtures/model/configs/qwen3-0.6b.json`,
 * random weights from `CausalLM.init`) on 1 × 2048 tokens, on the `torch` backend (CPU here),
 * for full fine-tuning and LoRA (r=16, alpha 32, all-linear: the base frozen, only the adapter
 * trained), each with and without gradient checkpointing. Each row runs in its own process, one
 * after another, so its peak RSS is its own.
 *
 * `BENCH_MEMORY_LAYERS` (default `28`, the full depth) lists the depths to run; with two or more
 * depths the table also extrapolates each mode to 28 layers from the per-layer slope (peak and
 * step time are linear in depth: the head and embedding are a fixed part). Every row prints the
 * peak RSS beside `trainingMemory`'s prediction (model/memory.ts) for the same step.
 * `BENCH_MEMORY_TOKENS` (default 2048), `BENCH_MEMORY_MODES` (default
 * `full,full+ckpt,lora,lora+ckpt`). With checkpointing the LM head is chunked
 * (`CausalLM.headChunkTokens`, `BENCH_MEMORY_HEAD_CHUNK` tokens, default the model's 256); a
 * mode ending in `+nochunk` (e.g. `lora+ckpt+nochunk`) runs the head over all tokens at once.
 *
 * Writes bench/results/train-memory.json.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const configPath = fileURLToPath(
  new URL('../test/fixtures/model/configs/qwen3-0.6b.json', import.meta.url),
);
const mib = (b: number): number => b / 2 ** 20;

interface Row {
  mode: string;
  layers: number;
  tokens: number;
  /** Tokens per chunk of the LM head (0: unchunked). */
  headChunkTokens: number;
  params: number;
  trainable: number;
  stepSeconds: number;
  tokensPerSecond: number;
  peakRssMiB: number;
  rssBeforeMiB: number;
  /** RSS when the step starts: the model built, the JS heap of its random init not all returned. */
  rssAtStepMiB: number;
  /** The base weights' float32 bytes: the yardstick of the LoRA goal (peak ≤ 1.5× weights). */
  weightsMiB: number;
  predictedMiB: number;
}

async function measure(mode: string, layers: number, tokens: number): Promise<Row> {
  const { initBackend, tf } = await import('../model/backend.ts');
  const { resolveConfig } = await import('../model/config.ts');
  const { CausalLM } = await import('../model/llama.ts');
  const { trainingMemory } = await import('../model/memory.ts');
  const { maskedNllLoss, ModelTrainer } = await import('../model/training.ts');
  const { parseTargetModules } = await import('../model/lora-adapter.ts');
  await initBackend('torch');
  const rssBefore = process.memoryUsage().rss;
  const raw = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, unknown>;
  const config = resolveConfig({ ...raw, num_hidden_layers: layers });
  const model = CausalLM.init(config, { seed: 1 });
  const ckpt = mode.includes('ckpt');
  model.gradientCheckpointing = ckpt;
  if (process.env.BENCH_MEMORY_HEAD_CHUNK)
    model.headChunkTokens = Number(process.env.BENCH_MEMORY_HEAD_CHUNK);
  if (mode.includes('nochunk')) model.headChunkTokens = 0;
  const headChunkTokens = ckpt ? model.headChunkTokens : 0;
  const lora = mode.startsWith('lora')
    ? model.attachLora(
        {
          r: 16,
          alpha: 32,
          targetModules: parseTargetModules('all-linear'),
          dropout: 0,
          baseModel: configPath,
        },
        { seed: 1 },
      )
    : undefined;
  const trainable = lora ? lora.numParameters : model.numParameters;
  const trainer = new ModelTrainer(model, { lr: 1e-5 });
  const ids = tf.tensor2d(
    Array.from({ length: tokens + 1 }, (_, t) => (t * 104729) % config.vocab_size),
    [1, tokens + 1],
    'int32',
  );
  const mask = tf.onesLike(ids).toFloat() as typeof ids;
  // The step's own peak: collect the JS garbage of building the model (its random init runs in
  // JS; a loaded checkpoint leaves other garbage) and reset the kernel's high-water mark (the
  // init peaks above what the step holds), then read it after the step.
  (globalThis as { gc?: () => void }).gc?.();
  writeFileSync('/proc/self/clear_refs', '5');
  const rssAtStep = process.memoryUsage().rss;
  const t0 = performance.now();
  trainer.accumulate(() => maskedNllLoss(model, ids, mask));
  trainer.step();
  const s = (performance.now() - t0) / 1000;
  const predicted = trainingMemory(config, {
    tokens,
    gradientCheckpointing: ckpt,
    trainableParameters: trainable,
    headChunkTokens,
    attention: 'blocks',
    ...(lora ? { lora: lora.config } : {}),
  }).totalBytes;
  return {
    mode,
    layers,
    tokens,
    headChunkTokens,
    params: model.numParameters,
    trainable,
    stepSeconds: s,
    tokensPerSecond: tokens / s,
    peakRssMiB:
      Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))![1]) / 1024,
    rssBeforeMiB: mib(rssBefore),
    rssAtStepMiB: mib(rssAtStep),
    weightsMiB: mib(4 * model.numParameters),
    predictedMiB: mib(predicted),
  };
}

const only = process.env.BENCH_MEMORY_ROW;
if (only) {
  const [mode, layers, tokens] = only.split(':');
  const r = await measure(mode!, Number(layers), Number(tokens));
  process.stdout.write(`RESULT ${JSON.stringify(r)}\n`);
  process.exit(0);
}

const tokens = Number(process.env.BENCH_MEMORY_TOKENS ?? 2048);
const depths = (process.env.BENCH_MEMORY_LAYERS ?? '28').split(',').map(Number);
const modes = (process.env.BENCH_MEMORY_MODES ?? 'full,full+ckpt,lora,lora+ckpt').split(',');
const rows: Row[] = [];
for (const layers of depths) {
  for (const mode of modes) {
    process.stderr.write(`  ${mode}, ${layers} layers, ${tokens} tokens ...\n`);
    const r = spawnSync(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', fileURLToPath(import.meta.url)],
      {
        env: { ...process.env, BENCH_MEMORY_ROW: `${mode}:${layers}:${tokens}` },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
    if (!line) {
      process.stderr.write(
        `  ${mode} at ${layers} layers failed: exit ${r.status} ${r.signal ?? ''}\n`,
      );
      continue;
    }
    const row = JSON.parse(line.slice(7)) as Row;
    process.stderr.write(`  ${JSON.stringify(row)}\n`);
    rows.push(row);
  }
}

console.log(
  '| mode | layers | trainable params | tokens/s | step s | peak RSS MiB | predicted MiB (model/memory.ts) |',
);
console.log('|---|---:|---:|---:|---:|---:|---:|');
const f = (x: number): string => x.toFixed(x < 10 ? 2 : 0);
for (const r of rows)
  console.log(
    `| ${r.mode} | ${r.layers} | ${r.trainable} | ${f(r.tokensPerSecond)} | ${f(r.stepSeconds)} | ${f(r.peakRssMiB)} | ${f(r.predictedMiB)} |`,
  );
const extrapolated: Record<string, unknown> = {};
for (const mode of modes) {
  const [a, b] = rows.filter((r) => r.mode === mode).sort((x, y) => x.layers - y.layers);
  if (!a || !b || a.layers === b.layers) continue;
  const per = (k: 'stepSeconds' | 'peakRssMiB'): number => (b[k] - a[k]) / (b.layers - a.layers);
  const at = (k: 'stepSeconds' | 'peakRssMiB'): number => a[k] + per(k) * (28 - a.layers);
  const e = {
    layers: 28,
    stepSeconds: at('stepSeconds'),
    tokensPerSecond: tokens / at('stepSeconds'),
    peakRssMiB: at('peakRssMiB'),
    perLayerPeakMiB: per('peakRssMiB'),
    perLayerSeconds: per('stepSeconds'),
  };
  extrapolated[mode] = e;
  console.log(
    `| ${mode}, extrapolated from ${a.layers} and ${b.layers} layers | 28 | | ${f(e.tokensPerSecond)} | ${f(e.stepSeconds)} | ${f(e.peakRssMiB)} (${f(e.perLayerPeakMiB)}/layer) | |`,
  );
}
const out = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(out, { recursive: true });
writeFileSync(
  `${out}train-memory.json`,
  JSON.stringify({ tokens, rows, extrapolated }, null, 2) + '\n',
);
