/**
 * Gradient checkpointing (`CausalLM.gradientCheckpointing`): each decoder layer keeps only its
 * input and is recomputed in the backward pass. Its gradients equal the plain pass's for every
 * parameter, on the cpu oracle and on the torch backend (libtorch on CPU here), for a Llama with
 * o_proj bias and an untied head and a Qwen3 with q/k norms and tied embeddings. Tolerance: max
 * |Δ| ≤ 1e-6 × the parameter's largest |gradient| (the recomputation runs the same kernels on
 * the same inputs, so any difference is float summation order). And the peak of tensor bytes during
 * forward + backward falls (measured by `tf.profile`; the numbers are in bench/README.md).
 *
 * Needs libtorch (CI installs Debian's libtorch-dev); without it the torch case fails, naming
 * what is missing.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf, type BackendName } from '../../model/backend.ts';
import { resolveConfig, type LlamaConfig } from '../../model/config.ts';
import type { CausalLM } from '../../model/llama.ts';
import { freeingGrads } from '../../model/recompute.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../../model/training.ts';
import { activationHeavyModel, randomModel, tinyFamilyConfigs } from '../fixtures/model/tiny.ts';

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

/** Loss and every parameter's gradient, keyed by HF name. */
function gradsOf(m: CausalLM): { loss: number; grads: Map<string, Float32Array> } {
  const batch = padBatch(seqs);
  const mask = tf.tensor2d(
    seqs.flatMap((s) => Array.from({ length: batch.T }, (_, t) => (t > 0 && t < s.length ? 1 : 0))),
    [seqs.length, batch.T],
  );
  const names = [...m.params.keys()];
  const { value, grads } = tf.variableGrads(
    () => maskedNllLoss(m, batch.ids, mask),
    names.map((n) => m.params.get(n)!),
  );
  const out = new Map(
    names.map((n) => [n, grads[m.params.get(n)!.name]!.dataSync() as Float32Array]),
  );
  const loss = value.dataSync()[0]!;
  tf.dispose([value, batch.ids, mask, ...Object.values(grads)]);
  return { loss, grads: out };
}

for (const backend of ['cpu', 'torch'] as BackendName[]) {
  for (const [family, config] of Object.entries(configs)) {
    test(`${backend}, ${family}: checkpointed gradients equal the plain pass's for every parameter`, async () => {
      await initBackend(backend);
      const m = randomModel(config, 5);
      const plain = gradsOf(m);
      m.gradientCheckpointing = true;
      const before = tf.memory().numTensors;
      const ckpt = gradsOf(m);
      assert.is(tf.memory().numTensors, before, 'no tensor outlives the step');
      assert.ok(Math.abs(ckpt.loss - plain.loss) < 1e-6, `loss ${ckpt.loss} vs ${plain.loss}`);
      assert.is(ckpt.grads.size, m.params.size);
      for (const [name, want] of plain.grads) {
        const got = ckpt.grads.get(name)!;
        let scale = 0;
        let diff = 0;
        for (let i = 0; i < want.length; i++) {
          scale = Math.max(scale, Math.abs(want[i]!));
          diff = Math.max(diff, Math.abs(got[i]! - want[i]!));
        }
        assert.ok(scale > 0, `${name}: a gradient reaches it`);
        assert.ok(diff <= 1e-6 * scale, `${name}: max |Δ| ${diff} against max |g| ${scale}`);
      }
      m.dispose();
    });
  }
}

test('torch: a ModelTrainer step with checkpointing gives the plain step (weights after AdamW)', async () => {
  await initBackend('torch');
  const weightsAfter = (ckpt: boolean): Map<string, Float32Array> => {
    const m = randomModel(configs.qwen3!, 9);
    m.gradientCheckpointing = ckpt;
    const t = new ModelTrainer(m, { lr: 1e-3, maxGradNorm: 1 });
    const batch = padBatch(seqs);
    const mask = tf.onesLike(batch.ids).toFloat() as tf.Tensor2D;
    t.accumulate(() => maskedNllLoss(m, batch.ids, mask));
    t.step();
    const w = new Map([...m.params].map(([n, v]) => [n, v.dataSync() as Float32Array]));
    tf.dispose([batch.ids, mask]);
    t.dispose();
    m.dispose();
    return w;
  };
  const plain = weightsAfter(false);
  const ckpt = weightsAfter(true);
  for (const [name, want] of plain) {
    const got = ckpt.get(name)!;
    let diff = 0;
    for (let i = 0; i < want.length; i++) diff = Math.max(diff, Math.abs(got[i]! - want[i]!));
    // AdamW's first step moves each weight by lr; 1e-5 is a hundredth of that.
    assert.ok(diff < 1e-5, `${name}: ${diff}`);
  }
});

/** Peak tensor bytes of one forward + backward of a model deep and long enough for activations to dominate. */
async function peakBytes(backend: BackendName, checkpointing: boolean): Promise<number> {
  await initBackend(backend);
  const { model: m, ids, mask } = activationHeavyModel();
  m.gradientCheckpointing = checkpointing;
  const vars = [...m.params.values()];
  // The trainer's walk (freeingGrads), which frees the forward's other intermediates already.
  const profile = await tf.profile(() => {
    const { value, grads } = freeingGrads(() => maskedNllLoss(m, ids, mask), vars);
    tf.dispose([value, ...grads.filter((g) => g !== undefined)]);
  });
  tf.dispose([ids, mask]);
  m.dispose();
  return profile.peakBytes;
}

for (const backend of ['cpu', 'torch'] as BackendName[]) {
  test(`${backend}: checkpointing lowers the peak of tensor bytes in forward + backward`, async () => {
    const plain = await peakBytes(backend, false);
    const ckpt = await peakBytes(backend, true);
    process.stderr.write(`  ${backend} peak tensor bytes: plain ${plain}, checkpointed ${ckpt}\n`);
    assert.ok(ckpt < plain, `checkpointed ${ckpt} >= plain ${plain}`);
  });
}

test.run();
