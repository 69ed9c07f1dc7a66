/**
 * LoRA trains on the `torch` backend (libtorch on CPU here) as on the `cpu` oracle: through
 * `ModelTrainer`, the trainer the policy and critic roles use, only the adapter's matrices get
 * gradients and optimizer state, the base weights stay bit for bit, every A and B moves and the
 * loss falls; and the adapter's gradients of the same loss, on the same base and adapter, equal
 * the `cpu` backend's: max |Δ| ≤ 2e-5 × the tensor's largest |gradient| for every A and B (torch's
 * kernels sum in another order than the pure-JS ones; measured up to 4.2e-6 on 2026-11-28). Llama (untied head, o_proj bias) and Qwen3 (q/k norms, tied).
 *
 * Needs libtorch (CI installs Debian's libtorch-dev); without it this fails, naming what is missing.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { resolveConfig, type LlamaConfig } from '../../model/config.ts';
import { CausalLM } from '../../model/llama.ts';
import { parseTargetModules, type LoraAdapter, type LoraConfig } from '../../model/lora-adapter.ts';
import type { NamedTensors } from '../../model/tensors.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../../model/training.ts';
import { maxAbsDiff, randomModel, tinyFamilyConfigs } from '../fixtures/model/tiny.ts';

const configs: Record<string, LlamaConfig> = {
  llama: resolveConfig(
    tinyFamilyConfigs()['llama v4 (q/k/v/o bias, head_dim 8, llama3 rope_scaling, untied)']!,
  ),
  qwen3: resolveConfig(
    tinyFamilyConfigs()['qwen3 v4 (q/k norm, head_dim 8 decoupled from hidden 16, tied)']!,
  ),
};

const seqs = [
  [1, 2, 3, 4, 5, 6, 7, 8, 9],
  [11, 12, 13],
  [20, 3, 21, 22, 5, 6],
];

const lora: LoraConfig = {
  r: 4,
  alpha: 8,
  targetModules: parseTargetModules('all-linear'),
  dropout: 0,
  baseModel: 'base',
};

const bits = (a: Float32Array): string =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('hex');

/** One accumulated pass of the next-token loss; returns the loss. */
function accumulate(m: CausalLM, t: ModelTrainer): number {
  const batch = padBatch(seqs);
  const mask = tf.tensor2d(
    seqs.flatMap((s) => Array.from({ length: batch.T }, (_, i) => (i > 0 && i < s.length ? 1 : 0))),
    [seqs.length, batch.T],
  );
  try {
    return t.accumulate(() => maskedNllLoss(m, batch.ids, mask));
  } finally {
    tf.dispose([batch.ids, mask]);
  }
}

/** The gradients the trainer accumulated, by name (read through the data-parallel hook). */
async function accumulatedGradients(t: ModelTrainer): Promise<Record<string, Float32Array>> {
  let out: Record<string, Float32Array> = {};
  await t.reduceGradients(async (g) => {
    out = Object.fromEntries(Object.entries(g).map(([n, a]) => [n, a.slice()]));
  });
  return out;
}

/**
 * The adapter's gradients of the loss for `base` + `adapter` on the current backend: an adapter
 * with B ≠ 0, so both A and B get gradients.
 */
async function adapterGradients(
  config: LlamaConfig,
  base: NamedTensors,
  adapter: LoraAdapter,
): Promise<Record<string, Float32Array>> {
  const m = CausalLM.fromTensors(config, structuredClone(base));
  m.attachLora(lora, { adapter: structuredClone(adapter) });
  const t = new ModelTrainer(m, { lr: 1e-3, maxGradNorm: 1 });
  accumulate(m, t);
  const g = await accumulatedGradients(t);
  t.dispose();
  m.dispose();
  return g;
}

for (const [family, config] of Object.entries(configs)) {
  test(`torch, ${family}: only the adapter trains — the base gets no gradient and stays bit for bit, every A and B moves, the loss falls`, async () => {
    await initBackend('torch');
    const m = randomModel(config, 3);
    const base = m.exportWeights();
    m.attachLora(lora, { seed: 5 });
    const a0 = m.lora!.exportAdapter();
    const adapterNames = [...m.lora!.vars.keys()].sort();
    const t = new ModelTrainer(m, { lr: 2e-2, maxGradNorm: 1 });
    const losses: number[] = [];
    for (let i = 0; i < 8; i++) {
      losses.push(accumulate(m, t));
      if (i === 0) {
        const g = await accumulatedGradients(t);
        assert.equal(Object.keys(g).sort(), adapterNames, 'gradients for the adapter alone');
      }
      t.step();
    }
    assert.equal(
      Object.keys(t.exportOptimizerState()).sort(),
      [...adapterNames.map((n) => `adam.m.${n}`), ...adapterNames.map((n) => `adam.v.${n}`)].sort(),
    );
    const after = m.exportWeights();
    for (const [name, w] of Object.entries(base))
      assert.is(bits(after[name]!.data), bits(w.data), `${name}: base unchanged`);
    const a1 = m.lora!.exportAdapter();
    for (const n of Object.keys(a1.tensors))
      assert.ok(maxAbsDiff(a1.tensors[n]!.data, a0.tensors[n]!.data) > 0, `${n} moved`);
    assert.ok(
      losses.at(-1)! < 0.9 * losses[0]!,
      `loss falls: ${losses.map((l) => l.toFixed(3)).join(' → ')}`,
    );
    t.dispose();
    m.dispose();
  });

  test(`torch, ${family}: the adapter's gradients equal the cpu backend's (2e-5 of each tensor's largest)`, async () => {
    await initBackend('cpu');
    const m = randomModel(config, 7);
    const base = m.exportWeights();
    m.attachLora(lora, { seed: 2 });
    // B is zero at initialisation (so A's gradient is too): give both values.
    tf.tidy(() =>
      m.lora!.vars.forEach((v, n) =>
        v.assign(tf.randomNormal(v.shape, 0, 0.2, 'float32', n.length + v.size)),
      ),
    );
    const adapter = m.lora!.exportAdapter();
    m.dispose();
    const want = await adapterGradients(config, base, adapter);
    await initBackend('torch');
    const before = tf.memory().numTensors;
    const got = await adapterGradients(config, base, adapter);
    assert.is(tf.memory().numTensors, before, 'no tensors leak on torch');
    assert.equal(Object.keys(got).sort(), Object.keys(want).sort());
    for (const [name, w] of Object.entries(want)) {
      const scale = Math.max(...Array.from(w, Math.abs));
      assert.ok(scale > 0, `${name}: a gradient reaches it`);
      const d = maxAbsDiff(got[name]!, w);
      assert.ok(d <= 2e-5 * scale, `${name}: max |Δ| ${d} against max |g| ${scale}`);
    }
  });
}

test.run();
