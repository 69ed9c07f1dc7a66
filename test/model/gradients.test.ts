import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { maskedNllLoss } from '../../model/training.ts';
import { maxAbsDiff, randomModel, tinyLlamaConfig } from '../fixtures/model/tiny.ts';

const ids = [
  [3, 17, 5, 39, 0, 22],
  [8, 8, 11, 30, 2, 1],
];
const mask = [
  [0, 0, 1, 1, 1, 1],
  [0, 1, 1, 1, 1, 0],
];

function lossOf(m: ReturnType<typeof randomModel>): tf.Scalar {
  return maskedNllLoss(m, tf.tensor2d(ids, [2, 6], 'int32'), tf.tensor2d(mask, [2, 6]));
}

test('analytic gradients match central finite differences (cpu, tiny model)', async () => {
  await initBackend('cpu');
  const m = randomModel(tinyLlamaConfig({ tie_word_embeddings: true, num_hidden_layers: 1 }), 11);
  const vars = [...m.params.values()];
  const { grads } = tf.variableGrads(() => lossOf(m), vars);
  const eps = 1e-2;
  let checked = 0;
  for (const name of [
    'model.embed_tokens.weight',
    'model.layers.0.self_attn.q_proj.weight',
    'model.layers.0.self_attn.k_proj.weight',
    'model.layers.0.mlp.down_proj.weight',
    'model.layers.0.input_layernorm.weight',
    'model.norm.weight',
  ]) {
    const v = m.params.get(name)!;
    const g = grads[v.name]!.dataSync();
    const base = v.dataSync().slice();
    // the coordinates with the largest gradients carry signal above float32 noise
    const order = Array.from(g.keys())
      .sort((a, b) => Math.abs(g[b]!) - Math.abs(g[a]!))
      .slice(0, 3);
    for (const i of order) {
      const at = (delta: number): number => {
        const w = base.slice();
        w[i]! += delta;
        v.assign(tf.tensor(w, v.shape));
        return tf.tidy(() => lossOf(m).dataSync()[0]!);
      };
      const fd = (at(eps) - at(-eps)) / (2 * eps);
      v.assign(tf.tensor(base, v.shape));
      const rel = Math.abs(fd - g[i]!) / Math.max(1e-3, Math.abs(fd) + Math.abs(g[i]!));
      assert.ok(rel < 0.03, `${name}[${i}]: analytic ${g[i]} vs numeric ${fd}`);
      checked++;
    }
  }
  assert.is(checked, 18);
  Object.values(grads).forEach((t) => t.dispose());
  m.dispose();
});

test('wasm gradients (embedding via ScatterNd) equal cpu gradients', async () => {
  await initBackend('cpu');
  const m = randomModel(tinyLlamaConfig(), 12);
  const w = m.exportWeights();
  const gradsOn = (model: typeof m): Record<string, Float32Array> => {
    const { grads } = tf.variableGrads(() => lossOf(model), [...model.params.values()]);
    const out: Record<string, Float32Array> = {};
    for (const [k, t] of Object.entries(grads)) {
      out[k.replace(/#\d+$/, '')] = t.dataSync() as Float32Array;
      t.dispose();
    }
    return out;
  };
  const cpu = gradsOn(m);
  m.dispose();
  await initBackend('wasm');
  const { CausalLM } = await import('../../model/llama.ts');
  const m2 = CausalLM.fromTensors(tinyLlamaConfig(), w);
  const wasm = gradsOn(m2);
  for (const k of Object.keys(cpu)) assert.ok(maxAbsDiff(cpu[k]!, wasm[k]!) < 1e-5, k);
  // ids 8 appears twice: its embedding row gets the sum of both positions' gradients
  assert.ok(Math.max(...Array.from(wasm['model.embed_tokens.weight']!).map(Math.abs)) > 0);
  m2.dispose();
});

test.run();
