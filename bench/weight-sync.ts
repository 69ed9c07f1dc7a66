/**
 * `npm run bench -- weight-sync`: one full weight update of a Qwen3-0.6B-shaped model (random
 * float32 weights, `test/fixtures/model/configs/qwen3-0.6b.json`) into the Python SGLang fake
 * (`test/fakes/weight_sync_server.py`, Debian's python3-torch), two ways in the same run:
 * `disk` (the engine writes the HF checkpoint, the server reloads it through
 * `/update_weights_from_disk`) and `gloo` (the engine, rank 0 of a c10d group, announces each
 * 1 GiB bucket through `/update_weights_from_distributed` and broadcasts its tensors). Each row is
 * the whole `updateWeights` call, the pause and continue included; the update is checked to
 * have landed (every tensor's SHA-256 on the server).
 *
 * `BENCH_WSYNC_LAYERS` (28: the full model; fewer cuts the decoder layers, the embedding stays),
 * `BENCH_WSYNC_ROUNDS` (2, the median is reported). Writes bench/results/weight-sync.json.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SglangEngine } from '../engines/sglang/index.ts';
import { parameterShapes, resolveConfig } from '../model/config.ts';
import type { NamedTensors } from '../model/tensors.ts';
import { writeEngineCheckpoint } from '../roles/rollout-engine.ts';
import { startWeightSyncFake } from '../test/fakes/weight-sync-server.ts';
import { cpuModel } from './machine.ts';

const layers = Number(process.env.BENCH_WSYNC_LAYERS ?? 28);
const rounds = Number(process.env.BENCH_WSYNC_ROUNDS ?? 2);
const configPath = new URL('../test/fixtures/model/configs/qwen3-0.6b.json', import.meta.url);
const raw = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, unknown>;
const config = resolveConfig({ ...raw, num_hidden_layers: layers });

/** Random weights of `config`'s shapes (xorshift: the values do not matter, only the bytes). */
function randomWeights(seed: number): NamedTensors {
  let s = seed >>> 0 || 1;
  const out: NamedTensors = {};
  for (const [name, shape] of parameterShapes(config)) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    for (let i = 0; i < data.length; i++) {
      s ^= s << 13;
      s ^= s >>> 17;
      s ^= s << 5;
      data[i] = ((s >>> 0) / 2 ** 32 - 0.5) * 0.04;
    }
    out[name] = { shape, data };
  }
  return out;
}

const digests = (t: NamedTensors) =>
  Object.fromEntries(
    Object.entries(t).map(([n, v]) => [
      n,
      createHash('sha256')
        .update(Buffer.from(v.data.buffer, v.data.byteOffset, v.data.byteLength))
        .digest('hex'),
    ]),
  );

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

const dir = mkdtempSync(join(tmpdir(), 'rtjob-bench-wsync-'));
const pretrain = join(dir, 'pretrain');
mkdirSync(pretrain);
writeFileSync(join(pretrain, 'config.json'), JSON.stringify({ ...raw, num_hidden_layers: layers }));
const server = await startWeightSyncFake({ kind: 'sglang', timeoutS: 600 });
const rows: { name: string; seconds: number[]; medianS: number; gbPerS: number }[] = [];
let bytes = 0;
let params = 0;
try {
  for (const backend of ['disk', 'gloo'] as const) {
    const engine = new SglangEngine({
      urls: [server.url],
      weightSyncTimeoutMs: 1_800_000,
      writeCheckpoint: (t, v) => writeEngineCheckpoint(join(dir, 'weights'), pretrain, t, v),
      ...(backend === 'gloo' ? { weightSync: { backend: 'gloo' as const } } : {}),
    });
    const seconds: number[] = [];
    try {
      for (let r = 1; r <= rounds; r++) {
        const w = randomWeights(r * 7919 + (backend === 'gloo' ? 1 : 0));
        bytes = Object.values(w).reduce((a, t) => a + t.data.byteLength, 0);
        params = bytes / 4;
        const t0 = performance.now();
        await engine.updateWeights({ kind: 'tensors', tensors: w }, r);
        seconds.push((performance.now() - t0) / 1000);
        const held = await server.state();
        const want = digests(w);
        const names = Object.keys(want);
        if (
          Object.keys(held.digests).length !== names.length ||
          names.some((n) => held.digests[n] !== want[n])
        )
          throw new Error(`${backend}: the server does not hold the weights sent`);
        console.log(`${backend} round ${r}: ${seconds.at(-1)!.toFixed(2)} s`);
      }
    } finally {
      await engine.close();
    }
    const m = median(seconds);
    const name =
      backend === 'disk'
        ? 'disk (write checkpoint, /update_weights_from_disk)'
        : 'gloo (/update_weights_from_distributed + broadcast)';
    rows.push({ name, seconds, medianS: m, gbPerS: bytes / m / 1e9 });
  }
} finally {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
}

const machine = cpuModel();
console.log(
  `\none weight update, Qwen3-0.6B shapes with ${layers} of 28 layers (${(params / 1e6).toFixed(0)}M float32 parameters, ${(bytes / 1e9).toFixed(2)} GB), into the Python SGLang fake (${machine}), median of ${rounds}\n`,
);
console.log('| weight update | median s | GB/s | vs disk |');
console.log('|---|---:|---:|---:|');
const disk = rows[0]!.medianS;
for (const r of rows)
  console.log(
    `| ${r.name} | ${r.medianS.toFixed(2)} | ${r.gbPerS.toFixed(2)} | ${(disk / r.medianS).toFixed(2)}× |`,
  );
mkdirSync(fileURLToPath(new URL('./results', import.meta.url)), { recursive: true });
writeFileSync(
  fileURLToPath(new URL('./results/weight-sync.json', import.meta.url)),
  `${JSON.stringify({ layers, params, bytes, rounds, machine, rows }, null, 2)}\n`,
);
