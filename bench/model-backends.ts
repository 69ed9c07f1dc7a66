/**
 * The backends side by side in one process (part of `npm run bench -- model`): the same tiny
 * model, from the same weights, on each backend in `BENCH_MODEL_BACKENDS` (default `wasm,torch`),
 * measured in interleaved rounds so that every backend sees the same load: training tokens/s
 * (forward + backward + AdamW, 32 × 64 tokens) and generation tokens/s with the KV cache at batch 1
 * and 64 (20-token prompts). Medians over the rounds. A backend that cannot start (no libtorch)
 * gets a row saying why.
 */
import { BuiltinEngine } from '../engines/builtin/engine.ts';
import { type BackendName, initBackend, tf } from '../model/backend.ts';
import type { LlamaConfig } from '../model/config.ts';
import { CausalLM } from '../model/llama.ts';
import type { NamedTensors } from '../model/tensors.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../model/training.ts';

interface Setup {
  backend: BackendName;
  model: CausalLM;
  trainer: ModelTrainer;
  engine: BuiltinEngine;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Measures each backend; returns table rows and a JSON record. */
export async function compareBackends(
  config: LlamaConfig,
  weights: NamedTensors,
  opts: { quick: boolean; backends: BackendName[] },
): Promise<{ rows: [string, string][]; result: Record<string, unknown> }> {
  const rows: [string, string][] = [];
  const result: Record<string, unknown> = {};
  const setups: Setup[] = [];
  const restore = tf.getBackend() as BackendName;
  for (const backend of opts.backends) {
    try {
      await initBackend(backend);
    } catch (e) {
      rows.push([`backend ${backend}`, `unavailable: ${(e as Error).message.split('\n')[0]}`]);
      result[backend] = { unavailable: (e as Error).message };
      continue;
    }
    const model = CausalLM.fromTensors(config, structuredClone(weights));
    setups.push({
      backend,
      model,
      trainer: new ModelTrainer(model, { lr: 1e-5 }),
      engine: await BuiltinEngine.create({ model, eosTokenIds: [] }),
    });
  }
  const B = 32;
  const T = 64;
  const seqs = Array.from({ length: B }, (_, b) =>
    Array.from({ length: T }, (_, t) => 5 + ((b * 13 + t * 7) % 90)),
  );
  const newTokens = opts.quick ? 8 : 32;
  const prompts = (n: number): number[][] =>
    Array.from({ length: n }, (_, b) =>
      Array.from({ length: 20 }, (_, t) => 5 + ((b + t * 3) % 90)),
    );
  const train = (s: Setup): number => {
    const t0 = performance.now();
    // Not in a tidy: the trainer keeps the accumulated gradients until step().
    const batch = padBatch(seqs);
    const mask = tf.onesLike(batch.ids).toFloat() as tf.Tensor2D;
    s.trainer.accumulate(() => maskedNllLoss(s.model, batch.ids, mask));
    s.trainer.step();
    tf.dispose([batch.ids, mask]);
    return performance.now() - t0;
  };
  const generate = async (s: Setup, n: number): Promise<number> => {
    const t0 = performance.now();
    await Promise.all(
      prompts(n).map((p) =>
        s.engine.generate({ inputIds: p, gconfig: { maxNewTokens: newTokens, temperature: 1 } }),
      ),
    );
    return performance.now() - t0;
  };
  const ms = new Map(
    setups.map((s) => [s, { train: [] as number[], g1: [] as number[], g64: [] as number[] }]),
  );
  const rounds = opts.quick ? 2 : 4;
  for (let r = 0; r <= rounds; r++) {
    for (const s of setups) {
      await initBackend(s.backend);
      const m = ms.get(s)!;
      const times = [train(s), await generate(s, 1), await generate(s, 64)];
      // Round 0 warms up (kernel caches, the addon's first calls).
      if (r === 0) continue;
      m.train.push(times[0]!);
      m.g1.push(times[1]!);
      m.g64.push(times[2]!);
    }
  }
  for (const s of setups) {
    const m = ms.get(s)!;
    const trainTokS = (B * T * 1000) / median(m.train);
    const g1 = (newTokens * 1000) / median(m.g1);
    const g64 = (64 * newTokens * 1000) / median(m.g64);
    rows.push([
      `backend ${s.backend}: train tok/s (32×64, fwd+bwd+AdamW) / generate tok/s batch 1 / batch 64`,
      `${trainTokS.toFixed(0)} / ${g1.toFixed(0)} / ${g64.toFixed(0)}`,
    ]);
    result[s.backend] = {
      trainTokensPerSecond: trainTokS,
      generateBatch1TokensPerSecond: g1,
      generateBatch64TokensPerSecond: g64,
      rounds,
    };
    await initBackend(s.backend);
    await s.engine.close();
    s.trainer.dispose();
    s.model.dispose();
  }
  await initBackend(restore);
  return { rows, result };
}
