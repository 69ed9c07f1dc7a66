/**
 * `npm run bench -- lora-sync`: what a weight update costs the llama.cpp engine when the policy is
 * a LoRA adapter, against the full-weight update it replaces, on the same engine in the same run.
 *
 * Rows: the full weights written into the mapped GGUF in place (`{ kind: 'tensors' }`, today's
 * sync), then per rank an adapter on every linear module (`{ kind: 'lora' }`): writing its GGUF
 * LoRA file (before decoding is held) and loading + swapping it on the live context (decoding
 * held), medians of `BENCH_LORA_REPS` (default 5); then what node-llama-cpp's public route would
 * cost instead (a new context created with the `lora` option: the KV cache of every sequence
 * allocated again); then decode with and without the adapter (4 requests × 16 tokens,
 * temperature 1), in tokens per CPU-second of the process, alternating.
 *
 * The shipped tiny model by default; `BENCH_LORA_PRETRAIN=<dir>` for another checkpoint (e.g. a
 * Qwen3-0.6B-shaped one from model/random-checkpoint.ts), `BENCH_LORA_RANKS` (default 1,16),
 * `BENCH_LORA_DTYPE` (f32), `BENCH_LORA_DECODE_PAIRS` (3; 0 skips the decode rows). Writes bench/results/lora-sync.json.
 */
import { mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { LlamaCppEngine } from '../engines/llamacpp/index.ts';
import { readConfig, readWeights } from '../model/checkpoint.ts';
import { writeGgufLoraAdapter, type GgufDtype } from '../model/gguf/index.ts';
import { loraTargetModules, peftTensorName, type LoraAdapter } from '../model/lora-adapter.ts';
import { seededRandom } from '../model/prng.ts';
import { serializeSafetensors } from '../model/safetensors.ts';
import type { NamedTensors } from '../model/tensors.ts';

const pretrain =
  process.env.BENCH_LORA_PRETRAIN ??
  fileURLToPath(new URL('../model/pretrained/rtjob-tiny-math', import.meta.url));
const ranks = (process.env.BENCH_LORA_RANKS ?? '1,16').split(',').map(Number);
const dtype = (process.env.BENCH_LORA_DTYPE ?? 'f32') as GgufDtype;
const reps = Number(process.env.BENCH_LORA_REPS ?? 5);
const decodePairs = Number(process.env.BENCH_LORA_DECODE_PAIRS ?? 3);
const config = readConfig(pretrain);
const weights = readWeights(pretrain);
const params = Object.values(weights).reduce((a, t) => a + t.data.length, 0);

/** A rank-`r` adapter on every linear module of the decoder layers, A and B random. */
function adapter(r: number, seed: number): LoraAdapter {
  const rand = seededRandom(seed);
  const tensors: NamedTensors = {};
  for (const [name, w] of Object.entries(weights)) {
    const m = /^(model\.layers\.\d+\.(?:self_attn|mlp)\.(\w+))\.weight$/.exec(name);
    if (!m || !(loraTargetModules as readonly string[]).includes(m[2]!)) continue;
    const [out, inp] = w.shape as [number, number];
    const fill = (n: number) => Float32Array.from({ length: n }, () => (rand() - 0.5) * 0.02);
    tensors[peftTensorName(m[1]!, 'A')] = { shape: [r, inp], data: fill(r * inp) };
    tensors[peftTensorName(m[1]!, 'B')] = { shape: [out, r], data: fill(out * r) };
  }
  return {
    config: {
      r,
      alpha: 2 * r,
      targetModules: [...loraTargetModules],
      dropout: 0,
      baseModel: pretrain,
    },
    tensors,
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const mib = (b: number) => `${(b / 2 ** 20).toFixed(b < 2 ** 20 ? 3 : 1)} MiB`;
const ms = (x: number) =>
  x >= 1000 ? `${(x / 1000).toFixed(2)} s` : `${x.toFixed(x < 10 ? 2 : 1)} ms`;

const engine = await LlamaCppEngine.create({
  modelPath: pretrain,
  dtype,
  maxSequences: 4,
  contextSize: 256,
});
const rows: Record<string, string | number>[] = [];
let version = 0;

{
  const wall: number[] = [];
  const held: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    await engine.updateWeights({ kind: 'tensors', tensors: weights }, ++version);
    wall.push(performance.now() - t0);
    held.push(engine.stats.lastSyncMs);
  }
  const bytes =
    Object.values(weights).reduce((a, t) => a + t.data.length, 0) * (dtype === 'f32' ? 4 : 2);
  rows.push({
    update: `full weights, in place (${dtype})`,
    moved: mib(bytes),
    write: '—',
    held: ms(median(held)),
    total: ms(median(wall)),
  });
}

const adapters = new Map<number, LoraAdapter>();
for (const r of ranks) {
  const a = adapter(r, r);
  adapters.set(r, a);
  const wall: number[] = [];
  const write: number[] = [];
  const held: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    await engine.updateWeights({ kind: 'lora', adapter: a }, ++version);
    wall.push(performance.now() - t0);
    write.push(engine.stats.lastAdapterWriteMs);
    held.push(engine.stats.lastSyncMs);
  }
  const peft = serializeSafetensors(a.tensors, { format: 'pt' }).length;
  rows.push({
    update: `LoRA r=${r}, all-linear`,
    moved: mib(peft),
    write: ms(median(write)),
    held: ms(median(held)),
    total: ms(median(wall)),
  });
}

// node-llama-cpp's public route: a new context created with the adapter.
{
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const llama = await getLlama({ build: 'never', gpu: false, logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({
    modelPath: engine.layout.path,
    gpuLayers: 0,
    useMmap: true,
  });
  const file = `${engine.layout.path}.bench-lora.gguf`;
  writeGgufLoraAdapter(file, config, adapters.get(ranks.at(-1)!)!);
  const times: number[] = [];
  for (let i = 0; i < Math.min(reps, 3); i++) {
    const t0 = performance.now();
    const ctx = await model.createContext({
      contextSize: 256,
      sequences: 4,
      threads: 1,
      flashAttention: false,
      experimentalKvCacheKeyType: 'F32',
      experimentalKvCacheValueType: 'F32',
      lora: { adapters: [{ filePath: file }] },
    });
    times.push(performance.now() - t0);
    await ctx.dispose();
  }
  await model.dispose();
  rows.push({
    update: `(public route) new context with the r=${ranks.at(-1)} adapter, 4 × 256-token sequences`,
    moved: mib(statSync(file).size),
    write: '—',
    held: ms(median(times)),
    total: '—',
  });
  rmSync(file, { force: true });
}

// Decode with and without the adapter, alternating.
const prompts = Array.from({ length: 4 }, (_, i) =>
  Array.from(
    { length: 12 },
    (_, k) => 3 + ((i * 31 + k * 7) % (Math.min(config.vocab_size, 100) - 3)),
  ),
);
async function decodeRate(): Promise<number> {
  const c0 = process.cpuUsage();
  const rs = await Promise.all(
    prompts.map((inputIds, i) =>
      engine.generate({ inputIds, gconfig: { maxNewTokens: 16, temperature: 1, seed: i } }),
    ),
  );
  const c = process.cpuUsage(c0);
  return rs.reduce((a, r) => a + r.outputTokens.length, 0) / ((c.user + c.system) / 1e6);
}
const base: number[] = [];
const withLora: number[] = [];
const r = ranks.at(-1)!;
for (let i = 0; i < decodePairs; i++) {
  await engine.updateWeights({ kind: 'tensors', tensors: weights }, ++version);
  base.push(await decodeRate());
  await engine.updateWeights({ kind: 'lora', adapter: adapters.get(r)! }, ++version);
  withLora.push(await decodeRate());
}
await engine.close();

const table = [
  `${pretrain} (${(params / 1e6).toFixed(2)}M parameters, ${dtype} GGUF), medians of ${reps}:`,
  '',
  '| update | what moves | write | decoding held | total |',
  '| --- | --- | --- | --- | --- |',
  ...rows.map((x) => `| ${x.update} | ${x.moved} | ${x.write} | ${x.held} | ${x.total} |`),
  '',
  decodePairs > 0
    ? `decode, 4 × 16 tokens at temperature 1: ${median(base).toFixed(1)} tok per CPU-s on the base, ${median(withLora).toFixed(1)} with the r=${r} adapter (${(median(withLora) / median(base)).toFixed(2)}×)`
    : '',
];
console.log(table.join('\n'));
mkdirSync(fileURLToPath(new URL('./results', import.meta.url)), { recursive: true });
writeFileSync(
  fileURLToPath(
    new URL(
      `./results/lora-sync${process.env.BENCH_LORA_PRETRAIN ? '-pretrain' : ''}.json`,
      import.meta.url,
    ),
  ),
  JSON.stringify(
    { pretrain, params, dtype, reps, rows, decode: { base, withLora, rank: r } },
    null,
    2,
  ),
);
