/**
 * `npm run bench -- packing`: sequence packing (`--packing-samples`) against right-padded rows,
 * interleaved in one run on the same model and weights. One optimizer step over a long-tailed mix
 * of sample lengths (most short, a few long), cut into micro-batches under a token budget by the
 * trainer's own cut (`microBatches`, first-fit decreasing); padded, each micro-batch is its
 * samples right-padded to the longest; packed, it is one row of them end to end. Reported: the
 * padding share (slots holding no token, over all slots) and training tokens/s (real tokens over
 * forward + backward + AdamW), median of `BENCH_PACKING_ROUNDS` (default 3) rounds.
 *
 * Model: a small Qwen3-shaped model (hidden 128, 2 layers, 4 query / 2 key-value heads of 32,
 * SwiGLU 384, vocabulary 2048, tied), random weights, so that a round takes seconds on a shared
 * 2-core CPU. Backend: `BENCH_PACKING_BACKEND` (default torch).
 * Writes bench/results/packing.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { microBatches } from '../algorithms/packing.ts';
import { initBackend, tf, type BackendName } from '../model/backend.ts';
import { resolveConfig } from '../model/config.ts';
import { CausalLM } from '../model/llama.ts';
import { seededRandom } from '../model/prng.ts';
import { microBatchLayout } from '../roles/micro-batch.ts';
import { ModelTrainer, tokenStats } from '../model/training.ts';

const backend = await initBackend((process.env.BENCH_PACKING_BACKEND ?? 'torch') as BackendName);
const rounds = Number(process.env.BENCH_PACKING_ROUNDS ?? 3);
const budget = Number(process.env.BENCH_PACKING_TOKENS ?? 1024);
const config = resolveConfig({
  model_type: 'qwen3',
  vocab_size: 2048,
  hidden_size: 128,
  intermediate_size: 384,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 32,
  max_position_embeddings: 4096,
  rms_norm_eps: 1e-6,
  rope_theta: 1e6,
  tie_word_embeddings: true,
});
const model = CausalLM.init(config, { seed: 1 });
const trainer = new ModelTrainer(model, { lr: 1e-5 });

// 32 samples: 85% of 16-95 tokens, 15% of 300-700 (a long tail, as agent rollouts have).
const rand = seededRandom(7);
const seqs = Array.from({ length: 32 }, () => {
  const len = rand() < 0.85 ? 16 + Math.floor(rand() * 80) : 300 + Math.floor(rand() * 400);
  return Array.from({ length: len }, () => Math.floor(rand() * config.vocab_size));
});
const lengths = seqs.map((s) => s.length);
const tokens = lengths.reduce((a, b) => a + b, 0);
const cuts = microBatches(lengths, { maxSamples: 32, maxTokens: budget });

function step(packing: boolean): { ms: number; slots: number } {
  let slots = 0;
  const t0 = performance.now();
  for (const cut of cuts) {
    const mb = cut.indices.map((i) => seqs[i]!);
    trainer.accumulate(() => {
      const layout = microBatchLayout(mb, packing);
      slots += layout.slots;
      const mask = layout.rows(mb.map((s) => new Array<number>(s.length - 1).fill(1)));
      const { logprobs } = tokenStats(
        model,
        layout.ids,
        layout.packed ? { packed: layout.packed } : {},
      );
      return tf.div(tf.neg(tf.sum(tf.mul(logprobs, mask))), tf.sum(mask)) as tf.Scalar;
    });
  }
  trainer.step();
  return { ms: performance.now() - t0, slots };
}

const ms: Record<'padded' | 'packed', number[]> = { padded: [], packed: [] };
const slots: Record<'padded' | 'packed', number> = { padded: 0, packed: 0 };
step(true); // warm-up: kernels and allocations
for (let r = 0; r < rounds; r++) {
  for (const mode of r % 2 ? (['packed', 'padded'] as const) : (['padded', 'packed'] as const)) {
    const s = step(mode === 'packed');
    ms[mode].push(s.ms);
    slots[mode] = s.slots;
    process.stderr.write(`  round ${r} ${mode}: ${s.ms.toFixed(0)} ms\n`);
  }
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const result: Record<string, unknown> = {
  backend,
  samples: seqs.length,
  tokens,
  budget,
  microBatches: cuts.length,
};
console.log(`| layout | padding share | train tokens/s | ms/step |\n|---|---|---|---|`);
for (const mode of ['padded', 'packed'] as const) {
  const m = median(ms[mode]);
  const share = 1 - tokens / slots[mode];
  result[mode] = {
    paddingShare: share,
    tokensPerSecond: (tokens * 1000) / m,
    msPerStep: m,
    ms: ms[mode],
  };
  console.log(
    `| ${mode} | ${(share * 100).toFixed(1)}% | ${((tokens * 1000) / m).toFixed(0)} | ${m.toFixed(0)} |`,
  );
}
console.log(
  `\n${seqs.length} samples, ${tokens} tokens (lengths ${Math.min(...lengths)}-${Math.max(...lengths)}), ` +
    `${cuts.length} micro-batches under ${budget} tokens, ${backend}, median of ${rounds} interleaved rounds`,
);
const out = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(out, { recursive: true });
writeFileSync(`${out}packing.json`, JSON.stringify(result, null, 2) + '\n');
