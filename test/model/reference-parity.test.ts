import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../actors/model/backend.ts';
import { referenceLogits } from '../fixtures/model/reference-llama.ts';
import { maxAbsDiff, randomModel, tinyLlamaConfig, tinyQwenConfig } from '../fixtures/model/tiny.ts';
import type { CausalLM } from '../../actors/model/llama.ts';

const ids = [3, 17, 5, 39, 0, 22, 8, 8, 11, 30];

function modelLogits(m: CausalLM, seqs: number[][]): Float32Array {
  return tf.tidy(() => m.forward(tf.tensor2d(seqs, [seqs.length, seqs[0]!.length], 'int32')).logits!.dataSync() as Float32Array);
}

for (const backend of ['cpu', 'wasm'] as const) {
  test(`${backend}: Llama (GQA, untied) logits match the reference equations within 1e-4`, async () => {
    await initBackend(backend);
    const m = randomModel(tinyLlamaConfig(), 3);
    const ref = referenceLogits(m.config, m.exportWeights(), ids).flat();
    const ours = modelLogits(m, [ids]);
    const d = maxAbsDiff(ours, ref);
    assert.ok(d < 1e-4, `max diff ${d}`);
    assert.ok(Math.max(...ref.map(Math.abs)) > 0.5, 'logits are not trivially small');
    m.dispose();
  });

  test(`${backend}: Qwen2 (qkv bias, tied) logits match the reference equations within 1e-4`, async () => {
    await initBackend(backend);
    const m = randomModel(tinyQwenConfig(), 4);
    const ref = referenceLogits(m.config, m.exportWeights(), ids).flat();
    const d = maxAbsDiff(modelLogits(m, [ids]), ref);
    assert.ok(d < 1e-4, `max diff ${d}`);
    m.dispose();
  });
}

test('cpu and wasm give the same logits for the same weights (batch of 2)', async () => {
  await initBackend('cpu');
  const m = randomModel(tinyLlamaConfig(), 5);
  const w = m.exportWeights();
  const seqs = [ids, [...ids].reverse()];
  const cpu = modelLogits(m, seqs);
  m.dispose();
  await initBackend('wasm');
  const { CausalLM } = await import('../../actors/model/llama.ts');
  const m2 = CausalLM.fromTensors(tinyLlamaConfig(), w);
  const d = maxAbsDiff(modelLogits(m2, seqs), cpu);
  assert.ok(d < 1e-5, `cpu vs wasm max diff ${d}`);
  m2.dispose();
});

test.run();
