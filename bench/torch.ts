/**
 * `npm run bench -- torch`: rtjob's `torch` backend against PyTorch eager on the same CPU, same
 * libtorch, one thread each, in one run. The model is Qwen3-0.6B's config cut to
 * `BENCH_TORCH_LAYERS` decoder layers (default 2) with its tied vocabulary (`BENCH_TORCH_VOCAB`,
 * default 151,936: 187M parameters), random weights, built once in this process (rtjob) and once
 * in `bench/torch_reference.py` (PyTorch, a child process that answers one command at a time), so
 * the rounds interleave: each round times a training step (forward + next-token NLL + backward +
 * global-norm clipping + AdamW on `BENCH_TORCH_BATCH` × `BENCH_TORCH_TOKENS` tokens, default 2 ×
 * 128) and KV-cache decode at batch 1 and 8 (`BENCH_TORCH_NEW` new tokens after a 32-token
 * prompt, default 16) on each side, the side that goes first alternating. Medians over
 * `BENCH_TORCH_ROUNDS` rounds (default 3) after a warm-up round.
 *
 * Then one profiled training step on each side: rtjob's per TF.js kernel (`tf.profile`: time,
 * calls, bytes of new tensors) with the addon's own counters (time inside libtorch per op), and
 * PyTorch's `torch.profiler` table. Writes bench/results/torch.json.
 *
 * `BENCH_TORCH_THREADS` (default 1) sets both sides' intra-op threads; `BENCH_PYTHON` the python
 * that has torch (default: the first of `python3`, `/usr/bin/python3` that imports it).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { initBackend, tf } from '../model/backend.ts';
import { loadTorchAddon } from '../model/backends/torch/index.ts';
import { decodeStep, prefill } from '../model/kv-cache.ts';
import { CausalLM } from '../model/llama.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../model/training.ts';
import { qwen3ConfigPath, qwen3Cut, randomWeights } from './torch-model.ts';

const num = (k: string, d: number): number => Number(process.env[k] ?? d);
const threads = num('BENCH_TORCH_THREADS', 1);
// Before the addon loads: libtorch's OpenMP pool reads it once.
process.env['OMP_NUM_THREADS'] = String(threads);
const layers = num('BENCH_TORCH_LAYERS', 2);
const vocab = num('BENCH_TORCH_VOCAB', 151936);
const B = num('BENCH_TORCH_BATCH', 2);
const T = num('BENCH_TORCH_TOKENS', 128);
const rounds = num('BENCH_TORCH_ROUNDS', 3);
const newTokens = num('BENCH_TORCH_NEW', 16);
const promptLen = 32;
const decodeBatches = [1, 8];

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function findPython(): string {
  const cands = process.env['BENCH_PYTHON']
    ? [process.env['BENCH_PYTHON']]
    : ['python3', '/usr/bin/python3'];
  for (const py of cands) {
    const r = spawnSync(py, ['-c', 'import torch'], { stdio: 'ignore' });
    if (r.status === 0) return py;
  }
  console.error(
    `bench torch: no python with torch among ${cands.join(', ')} (apt-get install python3-torch, or set BENCH_PYTHON)`,
  );
  process.exit(1);
}

/** The PyTorch side: one JSON command out, one JSON answer back. */
class Reference {
  private readonly proc;
  private readonly lines: AsyncIterator<string>;
  constructor(python: string) {
    const script = fileURLToPath(new URL('./torch_reference.py', import.meta.url));
    this.proc = spawn(
      python,
      [
        script,
        qwen3ConfigPath,
        '--serve',
        ...[
          '--layers',
          layers,
          '--vocab',
          vocab,
          '--batch',
          B,
          '--seq',
          T,
          '--threads',
          threads,
        ].map(String),
      ],
      {
        stdio: ['pipe', 'pipe', 'inherit'],
        env: { ...process.env, OMP_NUM_THREADS: String(threads) },
      },
    );
    this.lines = createInterface({ input: this.proc.stdout })[Symbol.asyncIterator]();
  }
  async next(): Promise<Record<string, unknown>> {
    const r = await this.lines.next();
    if (r.done) throw new Error('bench torch: the PyTorch reference exited');
    return JSON.parse(r.value) as Record<string, unknown>;
  }
  async ask(cmd: Record<string, unknown>): Promise<Record<string, unknown>> {
    this.proc.stdin.write(JSON.stringify(cmd) + '\n');
    return this.next();
  }
  close(): void {
    this.proc.stdin.end();
  }
}

const python = findPython();
const ref = new Reference(python);
const refReady = ref.next();

await initBackend('torch');
const { addon } = loadTorchAddon();
const config = qwen3Cut(layers, vocab);
const model = CausalLM.fromTensors(config, randomWeights(config), { consume: true });
const trainer = new ModelTrainer(model, { lr: 1e-5 });
const ready = (await refReady)['ready'] as Record<string, unknown>;
console.log(
  `model: Qwen3-0.6B cut to ${layers} layers, vocabulary ${vocab}: ${model.numParameters} parameters ` +
    `(PyTorch ${String(ready['params'])}); ${B} × ${T} tokens; ${threads} thread(s); ` +
    `libtorch ${addon.info().version} (rtjob) / torch ${String(ready['torch'])} (${python})`,
);

const ids = Array.from({ length: B }, (_, b) =>
  Array.from({ length: T }, (_, t) => (b * 7919 + t * 104729) % vocab),
);
/** Wall and CPU (user + system, this process) milliseconds. */
type Timing = { ms: number; cpuMs: number };
const cpuNow = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
function trainStep(): Timing {
  const t0 = performance.now();
  const c0 = cpuNow();
  const batch = padBatch(ids);
  const mask = tf.onesLike(batch.ids).toFloat() as tf.Tensor2D;
  trainer.accumulate(() => maskedNllLoss(model, batch.ids, mask));
  trainer.step();
  tf.dispose([batch.ids, mask]);
  return { ms: performance.now() - t0, cpuMs: cpuNow() - c0 };
}
function decode(batch: number): Timing {
  const prompts = Array.from({ length: batch }, (_, b) =>
    Array.from({ length: promptLen }, (_, t) => (b * 31 + t * 17) % vocab),
  );
  const { cache } = prefill(model, prompts);
  decodeStep(
    model,
    cache,
    prompts.map(() => 5),
  );
  const t0 = performance.now();
  const c0 = cpuNow();
  for (let i = 0; i < newTokens; i++)
    decodeStep(
      model,
      cache,
      prompts.map((_, b) => (b + i) % 1000),
    );
  const t = { ms: performance.now() - t0, cpuMs: cpuNow() - c0 };
  cache.dispose();
  return t;
}

type Row = string;
const rowNames: Row[] = ['train', ...decodeBatches.map((b) => `decode${b}`)];
const empty = (): Record<Row, Timing[]> =>
  Object.fromEntries(rowNames.map((r) => [r, []])) as unknown as Record<Row, Timing[]>;
const ms: Record<'rtjob' | 'pytorch', Record<Row, Timing[]>> = { rtjob: empty(), pytorch: empty() };
for (let r = 0; r <= rounds; r++) {
  for (const row of rowNames) {
    const sides: ('rtjob' | 'pytorch')[] = r % 2 ? ['pytorch', 'rtjob'] : ['rtjob', 'pytorch'];
    for (const side of sides) {
      const batch = Number(row.slice('decode'.length));
      const cmd =
        row === 'train'
          ? { cmd: 'train' }
          : { cmd: 'decode', batch, prompt: promptLen, new: newTokens };
      const t =
        side === 'pytorch'
          ? ((await ref.ask(cmd)) as Timing)
          : row === 'train'
            ? trainStep()
            : decode(batch);
      // Round 0 warms up (allocator, kernel caches).
      if (r > 0) ms[side][row]!.push(t);
      console.log(
        `round ${r} ${row} ${side}: ${t.ms.toFixed(0)} ms wall, ${t.cpuMs.toFixed(0)} ms CPU` +
          (r === 0 ? ' (warm-up)' : ''),
      );
    }
  }
}

const tokens = (row: Row): number =>
  row === 'train' ? B * T : Number(row.slice('decode'.length)) * newTokens;
const result: Record<string, unknown> = {
  date: new Date().toISOString(),
  model: { layers, vocab, parameters: model.numParameters, batch: B, tokens: T, threads },
  rounds,
  newTokens,
};
console.log(
  '\n| row | rtjob tokens/s | PyTorch tokens/s | rtjob / PyTorch | same by CPU time (tokens per CPU-s) |',
);
console.log('| --- | ---: | ---: | ---: | ---: |');
const rate = (row: Row, ts: Timing[], k: keyof Timing): number =>
  (tokens(row) * 1000) / median(ts.map((t) => t[k]));
for (const row of rowNames) {
  const rt = rate(row, ms.rtjob[row]!, 'ms');
  const py = rate(row, ms.pytorch[row]!, 'ms');
  const rtc = rate(row, ms.rtjob[row]!, 'cpuMs');
  const pyc = rate(row, ms.pytorch[row]!, 'cpuMs');
  result[row] = {
    rtjobTokensPerSecond: rt,
    pytorchTokensPerSecond: py,
    ratio: rt / py,
    rtjobTokensPerCpuSecond: rtc,
    pytorchTokensPerCpuSecond: pyc,
    cpuRatio: rtc / pyc,
    rtjob: ms.rtjob[row],
    pytorch: ms.pytorch[row],
  };
  const label =
    row === 'train' ? `train step (${B}×${T}, fwd+NLL+bwd+AdamW)` : `decode batch ${row.slice(6)}`;
  console.log(
    `| ${label} | ${rt.toFixed(1)} | ${py.toFixed(1)} | ${((100 * rt) / py).toFixed(0)}% | ` +
      `${rtc.toFixed(1)} vs ${pyc.toFixed(1)}: ${((100 * rtc) / pyc).toFixed(0)}% |`,
  );
}

// One profiled step each side.
addon.counters(true);
let profiled: Timing = { ms: 0, cpuMs: 0 };
const prof = await tf.profile(() => {
  profiled = trainStep();
});
const profiledMs = profiled.ms;
const inside = addon.counters(false);
const byKernel = new Map<string, { ms: number; calls: number; bytes: number }>();
for (const k of prof.kernels) {
  const e = byKernel.get(k.name) ?? { ms: 0, calls: 0, bytes: 0 };
  e.ms += k.kernelTimeMs as number;
  e.calls++;
  e.bytes += Math.max(0, k.bytesAdded);
  byKernel.set(k.name, e);
}
const rtKernels = [...byKernel.entries()]
  .map(([name, e]) => ({ name, ...e }))
  .sort((a, b) => b.ms - a.ms);
const insideRows = Object.entries(inside)
  .map(([name, [calls, ns, bytes]]) => ({ name, calls, ms: ns / 1e6, bytes }))
  .sort((a, b) => b.ms - a.ms);
const kernelMs = rtKernels.reduce((s, k) => s + k.ms, 0);
const libtorchMs = insideRows.reduce((s, k) => s + k.ms, 0);
const pyKernels = (await ref.ask({ cmd: 'profile' }))['kernels'] as {
  name: string;
  calls: number;
  selfMs: number;
  totalMs: number;
  selfBytes: number;
}[];
ref.close();
const mb = (b: number): string => (b / 2 ** 20).toFixed(0);
console.log(
  `\nrtjob, one profiled step: ${profiledMs.toFixed(0)} ms wall, ${kernelMs.toFixed(0)} ms in TF.js ` +
    `kernels (${prof.kernels.length} calls), ${libtorchMs.toFixed(0)} ms inside libtorch ops ` +
    `(addon counters)`,
);
console.log(
  '| TF.js kernel | ms | calls | MiB new | | torch.profiler op | self ms | calls | MiB |',
);
console.log('| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |');
for (let i = 0; i < 20; i++) {
  const a = rtKernels[i];
  const p = pyKernels[i];
  console.log(
    `| ${a ? `${a.name} | ${a.ms.toFixed(0)} | ${a.calls} | ${mb(a.bytes)}` : ' | | |'} | | ` +
      `${p ? `${p.name} | ${p.selfMs.toFixed(0)} | ${p.calls} | ${mb(p.selfBytes)}` : ' | | |'} |`,
  );
}
result['profile'] = {
  rtjob: { wallMs: profiledMs, kernelMs, libtorchMs, kernels: rtKernels, addonOps: insideRows },
  pytorch: { kernels: pyKernels.slice(0, 60) },
};
trainer.dispose();
model.dispose();
const dir = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(dir, { recursive: true });
writeFileSync(`${dir}torch.json`, JSON.stringify(result, null, 2) + '\n');
