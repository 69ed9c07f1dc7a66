/**
 * Sequence packing (`packBatch`, `--packing-samples`): sequences end to end in one row, positions
 * restarting at each and attention confined to each, compute what the right-padded batch
 * computes. On the cpu oracle and the torch backend, for a Llama (o_proj bias, untied head) and a
 * Qwen3 (q/k norms, tied): each sequence's logits equal its padded row's, and the masked NLL and
 * every parameter's gradient equal the padded batch's. Tolerances: logits 1e-5 absolute (logits
 * of size ~1-10); loss 1e-6 relative; gradients max |Δ| ≤ 1e-5 × the parameter's largest |g|
 * (float32 sums over different row layouts).
 *
 * Needs libtorch (CI installs Debian's libtorch-dev); without it the torch cases fail, naming what
 * is missing.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { packedRows } from '../../algorithms/packing.ts';
import { initBackend, tf, type BackendName } from '../../model/backend.ts';
import { resolveConfig, type LlamaConfig } from '../../model/config.ts';
import type { CausalLM } from '../../model/llama.ts';
import { packBatch } from '../../model/batches.ts';
import { maskedNllLoss, padBatch } from '../../model/training.ts';
import { maxAbsDiff, randomModel, tinyFamilyConfigs } from '../fixtures/model/tiny.ts';

const configs: Record<string, LlamaConfig> = {
  llama: resolveConfig(
    tinyFamilyConfigs()['llama v4 (q/k/v/o bias, head_dim 8, llama3 rope_scaling, untied)']!,
  ),
  qwen3: resolveConfig(
    tinyFamilyConfigs()['qwen3 v4 (q/k norm, head_dim 8 decoupled from hidden 16, tied)']!,
  ),
};

// A long-tailed mix: one long sequence, several short ones.
const seqs = [
  [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19],
  [11, 12, 13],
  [20, 3, 21, 22, 5, 6],
  [7, 7],
  [30, 31, 32, 33],
];
// Per-token loss masks (1 = trained), token 0 never a target.
const masks = seqs.map((s, i) => s.map((_, t) => (t > 0 && (t + i) % 3 !== 0 ? 1 : 0)));

test('packBatch: positions restart, attention stays within each sequence', async () => {
  await initBackend('cpu');
  const p = packBatch([
    [5, 6, 7],
    [8, 9],
  ]);
  assert.equal(Array.from(p.ids.dataSync()), [5, 6, 7, 8, 9]);
  assert.equal(Array.from(p.positions.dataSync()), [0, 1, 2, 0, 1]);
  assert.equal(p.starts, [0, 3]);
  const b = p.attnBias.dataSync();
  const allowed = (i: number, j: number): boolean => b[i * 5 + j] === 0;
  assert.ok(allowed(2, 0) && allowed(2, 2) && !allowed(1, 2), 'causal within the first');
  assert.ok(allowed(4, 3) && !allowed(3, 2) && !allowed(4, 0), 'the second sees only itself');
  tf.dispose([p.ids, p.positions, p.attnBias]);
});

function lossAndGrads(
  m: CausalLM,
  packed: boolean,
): { loss: number; grads: Map<string, Float32Array> } {
  const names = [...m.params.keys()];
  const { value, grads } = tf.variableGrads(
    () => {
      if (packed) {
        const p = packBatch(seqs);
        const mask = packedRows(
          masks.map((x) => x.slice(1)),
          p.lengths,
        ).data;
        return maskedNllLoss(m, p.ids, tf.tensor2d([0, ...mask], [1, p.ids.size]), p);
      }
      const { ids } = padBatch(seqs);
      return maskedNllLoss(m, ids, padBatch(masks).ids.toFloat() as tf.Tensor2D);
    },
    names.map((n) => m.params.get(n)!),
  );
  const out = new Map(
    names.map((n) => [n, grads[m.params.get(n)!.name]!.dataSync() as Float32Array]),
  );
  const loss = value.dataSync()[0]!;
  tf.dispose([value, ...Object.values(grads)]);
  return { loss, grads: out };
}

for (const backend of ['cpu', 'torch'] as BackendName[]) {
  for (const [family, config] of Object.entries(configs)) {
    test(`${backend}, ${family}: each packed sequence's logits are its padded row's`, async () => {
      await initBackend(backend);
      const m = randomModel(config, 4);
      const V = config.vocab_size;
      const [padded, packed] = tf.tidy(() => {
        const p = packBatch(seqs);
        return [
          m.forward(padBatch(seqs).ids).logits!.dataSync() as Float32Array,
          m
            .forward(p.ids, { positions: p.positions, attnBias: p.attnBias })
            .logits!.dataSync() as Float32Array,
        ];
      });
      const T = Math.max(...seqs.map((s) => s.length));
      let at = 0;
      seqs.forEach((s, b) => {
        const want = padded.subarray(b * T * V, (b * T + s.length) * V);
        const got = packed.subarray(at * V, (at + s.length) * V);
        assert.ok(maxAbsDiff(got, want) < 1e-5, `sequence ${b}: ${maxAbsDiff(got, want)}`);
        at += s.length;
      });
      m.dispose();
    });

    test(`${backend}, ${family}: packed loss and every parameter's gradient equal the padded batch's`, async () => {
      await initBackend(backend);
      const m = randomModel(config, 6);
      const padded = lossAndGrads(m, false);
      const before = tf.memory().numTensors;
      const packed = lossAndGrads(m, true);
      assert.is(tf.memory().numTensors, before, 'no tensor outlives the step');
      assert.ok(
        Math.abs(packed.loss - padded.loss) <= 1e-6 * Math.abs(padded.loss),
        `loss ${packed.loss} vs ${padded.loss}`,
      );
      for (const [name, want] of padded.grads) {
        const got = packed.grads.get(name)!;
        let scale = 0;
        for (const g of want) scale = Math.max(scale, Math.abs(g));
        const diff = maxAbsDiff(got, want);
        assert.ok(scale > 0, `${name}: a gradient reaches it`);
        assert.ok(diff <= 1e-5 * scale, `${name}: max |Δ| ${diff} against max |g| ${scale}`);
      }
      m.dispose();
    });
  }
}

test.run();
