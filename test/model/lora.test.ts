/**
 * LoRA in the model: PEFT's initialisation leaves the model equal to its base (bit for bit), only
 * the adapter trains (the base gets no gradient, no optimizer state and is never rewritten), the
 * exported adapter merges (`mergeLoraAdapter`) into weights that give the adapted model's logits,
 * an adapter round-trips, the base is reachable with the adapter left out, dropout acts only in
 * passes built for training, and a LoRA checkpoint holds the adapter alone; the adapted product
 * (one op keeping only its input and the rank-sized product) has the composed form's value and
 * gradients. On cpu and wasm (the torch backend: test/model/torch-lora.test.ts, and here the
 * adapted product).
 */
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { LoraLayers } from '../../model/lora-layers.ts';
import { matMul } from '../../model/matmul.ts';
import { CausalLM, valueHeadName } from '../../model/llama.ts';
import {
  mergeLoraAdapter,
  parseTargetModules,
  peftTensorName,
  readLoraAdapter,
  type LoraConfig,
} from '../../model/lora-adapter.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../../model/training.ts';
import {
  maxAbsDiff,
  randomModel,
  tinyLlamaConfig,
  tinyQwenConfig,
} from '../fixtures/model/tiny.ts';

const seqs = [
  [1, 2, 3, 4, 5, 6, 7],
  [9, 8, 7, 6, 5, 4, 3],
  [3, 3, 1, 3, 3, 1, 3],
];

const lora = (over: Partial<LoraConfig> = {}): LoraConfig => ({
  r: 4,
  alpha: 8,
  targetModules: parseTargetModules('all-linear'),
  dropout: 0,
  baseModel: 'base',
  ...over,
});

const logitsOf = (m: CausalLM): Float32Array =>
  tf.tidy(() => m.forward(padBatch(seqs).ids, { grad: false }).logits!.dataSync() as Float32Array);

const bits = (a: Float32Array): string =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('hex');

/** Trains `m` for `steps` AdamW steps on the sequences' next-token loss. */
function train(m: CausalLM, steps: number, lr = 2e-2): ModelTrainer {
  const t = new ModelTrainer(m, { lr, maxGradNorm: 1 });
  const b = padBatch(seqs);
  const mask = tf.onesLike(b.ids).toFloat() as tf.Tensor2D;
  for (let i = 0; i < steps; i++) {
    t.accumulate(() => maskedNllLoss(m, b.ids, mask));
    t.step();
  }
  tf.dispose([b.ids, mask]);
  return t;
}

for (const backend of ['cpu', 'wasm'] as const) {
  test(`${backend}: a new adapter leaves the model equal to its base, bit for bit; A is U(-1/sqrt(in), 1/sqrt(in)), B zero`, async () => {
    await initBackend(backend);
    const m = randomModel(tinyLlamaConfig(), 2);
    const base = logitsOf(m);
    const layers = m.attachLora(lora(), { seed: 3 });
    assert.is(bits(logitsOf(m)), bits(base));
    const a = layers.exportAdapter();
    const qA = a.tensors[peftTensorName('model.layers.0.self_attn.q_proj', 'A')]!;
    const downA = a.tensors[peftTensorName('model.layers.1.mlp.down_proj', 'A')]!;
    assert.equal(qA.shape, [4, 16]);
    assert.equal(downA.shape, [4, 24]);
    for (const [t, inDim] of [
      [qA, 16],
      [downA, 24],
    ] as const) {
      const bound = 1 / Math.sqrt(inDim);
      const max = Math.max(...Array.from(t.data, Math.abs));
      assert.ok(max <= bound && max > 0.5 * bound, `A within ±${bound} and spread: ${max}`);
    }
    for (const [name, t] of Object.entries(a.tensors))
      if (name.endsWith('lora_B.weight'))
        assert.ok(
          t.data.every((x) => x === 0),
          name,
        );
    // 7 modules × 2 layers × (A + B).
    assert.is(Object.keys(a.tensors).length, 28);
    m.dispose();
  });

  test(`${backend}: only the adapter trains; the base gets no optimizer state and stays bit for bit`, async () => {
    await initBackend(backend);
    const m = randomModel(tinyLlamaConfig(), 4);
    const before = m.exportWeights();
    m.attachLora(lora({ targetModules: parseTargetModules('q_proj,v_proj,down_proj') }), {
      seed: 1,
    });
    const a0 = m.lora!.exportAdapter();
    const t = train(m, 3);
    const state = Object.keys(t.exportOptimizerState());
    assert.ok(state.length > 0);
    assert.ok(
      state.every((n) => /lora_[AB]\.weight$/.test(n)),
      `optimizer state only for adapter matrices: ${state.find((n) => !/lora_/.test(n))}`,
    );
    assert.is(state.length, 2 * 2 * 3 * 2); // m and v × 2 layers × 3 modules × (A, B)
    const after = m.exportWeights();
    for (const [name, w] of Object.entries(before))
      assert.is(bits(after[name]!.data), bits(w.data), `${name} unchanged`);
    const a1 = m.lora!.exportAdapter();
    const moved = Object.keys(a1.tensors).filter(
      (n) => maxAbsDiff(a1.tensors[n]!.data, a0.tensors[n]!.data) > 0,
    );
    assert.is(moved.length, Object.keys(a1.tensors).length, 'every A and B moved');
    t.dispose();
    m.dispose();
  });

  test(`${backend}: the exported adapter merges (W + alpha/r·B·A) into weights with the adapted model's logits`, async () => {
    await initBackend(backend);
    const config = tinyQwenConfig();
    const m = randomModel(config, 6);
    const base = m.exportWeights();
    m.attachLora(lora({ alpha: 16 }), { seed: 2 });
    train(m, 4).dispose();
    const adapted = logitsOf(m);
    const adapter = m.lora!.exportAdapter();
    assert.is(adapter.config.alpha, 16);
    const merged = CausalLM.fromTensors(config, mergeLoraAdapter(base, adapter));
    const d = maxAbsDiff(logitsOf(merged), adapted);
    assert.ok(d < 1e-4, `merged vs base + adapter: ${d}`);
    assert.ok(maxAbsDiff(adapted, logitsOf(CausalLM.fromTensors(config, base))) > 1e-2, 'trained');
    // Round trip: a fresh base with the adapter loaded computes the same; without it, the base.
    const fresh = CausalLM.fromTensors(config, base);
    fresh.loadLora(adapter);
    assert.ok(maxAbsDiff(logitsOf(fresh), adapted) < 1e-6, 'loaded adapter');
    const plain = CausalLM.fromTensors(config, base);
    assert.is(bits(fresh.withoutLora(() => logitsOf(fresh))), bits(logitsOf(plain)));
    [m, merged, fresh, plain].forEach((x) => x.dispose());
  });
}

for (const backend of ['cpu', 'torch'] as const)
  test(`${backend}: the adapted product x·W + s·(x·A)·B gives the composed form's value and gradients`, async () => {
    await initBackend(backend);
    const m = randomModel(tinyLlamaConfig(), 5);
    const layers = new LoraLayers(m.config, lora(), { seed: 3 });
    const name = 'model.layers.0.mlp.up_proj.weight';
    const w = m.params.get(name)!;
    const [inF, outF] = w.shape as [number, number];
    const a = layers.vars.get(peftTensorName('model.layers.0.mlp.up_proj', 'A'))!;
    const b = layers.vars.get(peftTensorName('model.layers.0.mlp.up_proj', 'B'))!;
    b.assign(tf.randomNormal(b.shape, 0, 0.5, 'float32', 4));
    tf.tidy(() => {
      const x = tf.randomNormal([6, inF], 0, 1, 'float32', 7);
      const g = tf.randomNormal([6, outF], 0, 1, 'float32', 8);
      const s = 8 / 4;
      const composed = (xs: tf.Tensor, as: tf.Tensor, bs: tf.Tensor) =>
        tf.add(matMul(xs, w), matMul(tf.mul(matMul(xs, as), s), bs));
      const fused = (xs: tf.Tensor) => layers.linear(xs, w, name, matMul, 1)!;
      const d = maxAbsDiff(
        fused(x).dataSync() as Float32Array,
        composed(x, a, b).dataSync() as Float32Array,
      );
      assert.ok(d < 1e-5, `value differs by ${d}`);
      const fusedLoss = (xs: tf.Tensor) => tf.sum(tf.mul(fused(xs), g)) as tf.Scalar;
      const want = tf.grads((xs: tf.Tensor, as: tf.Tensor, bs: tf.Tensor) =>
        tf.sum(tf.mul(composed(xs, as, bs), g)),
      )([x, a, b]);
      const { grads } = tf.variableGrads(() => fusedLoss(x), [a, b]);
      const gotAll = [tf.grad(fusedLoss)(x), grads[a.name]!, grads[b.name]!];
      ['x', 'A', 'B'].forEach((n, i) => {
        const e = maxAbsDiff(
          gotAll[i]!.dataSync() as Float32Array,
          want[i]!.dataSync() as Float32Array,
        );
        assert.ok(e < 1e-5, `gradient of ${n} differs by ${e}`);
      });
    });
    layers.dispose();
    m.dispose();
  });

test('dropout applies to the adapter input only in passes built for training', async () => {
  await initBackend('cpu');
  const m = randomModel(tinyLlamaConfig(), 8);
  m.attachLora(lora({ dropout: 0.5 }), { seed: 1 });
  // B is zero at first: give it values so the adapter's input matters.
  tf.tidy(() =>
    m.lora!.vars.forEach((v) => v.assign(tf.randomNormal(v.shape, 0, 0.3, 'float32', 5))),
  );
  const ids = padBatch(seqs).ids;
  const run = (grad: boolean) =>
    tf.tidy(() => m.forward(ids, { grad }).logits!.dataSync() as Float32Array);
  assert.is(bits(run(false)), bits(run(false)), 'inference is deterministic');
  assert.ok(maxAbsDiff(run(true), run(false)) > 1e-3, 'training pass drops adapter inputs');
  m.dispose();
});

test('a critic with LoRA trains its adapter and its value head in full, nothing else', async () => {
  await initBackend('cpu');
  const m = randomModel(tinyLlamaConfig(), 9, { valueHead: true });
  m.attachLora(lora({ targetModules: ['q_proj'] }), { seed: 1 });
  const names = [...m.trainableParams().keys()];
  assert.ok(names.includes(valueHeadName));
  assert.is(names.length, 1 + 2 * 2);
  m.dispose();
});

test('a LoRA checkpoint holds the adapter (PEFT layout) and its optimizer state, and resumes exactly', async () => {
  await initBackend('cpu');
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-lora-ckpt-'));
  try {
    const config = tinyLlamaConfig();
    const m = randomModel(config, 11, { valueHead: true });
    const base = m.exportWeights();
    m.attachLora(lora({ baseModel: '/models/base' }), { seed: 1 });
    const t = train(m, 2);
    t.saveCheckpoint(join(dir, 'ckpt'), { note: 'x' });
    const files = readdirSync(join(dir, 'ckpt')).sort();
    assert.equal(files, [
      'adapter_config.json',
      'adapter_model.safetensors',
      'optimizer.safetensors',
      'trainer_state.json',
      'value_head.safetensors',
    ]);
    assert.is(readLoraAdapter(join(dir, 'ckpt')).config.baseModel, '/models/base');
    // The resumed run takes the same next step as the original.
    const m2 = CausalLM.fromTensors(config, structuredClone(base));
    m2.attachLora(lora(), { seed: 99 });
    const t2 = new ModelTrainer(m2, { lr: 2e-2, maxGradNorm: 1 });
    assert.is(t2.loadCheckpoint(join(dir, 'ckpt')).note, 'x');
    assert.is(t2.stepCount, 2);
    for (const [model, trainer] of [
      [m, t],
      [m2, t2],
    ] as const) {
      const b = padBatch(seqs);
      trainer.accumulate(() =>
        maskedNllLoss(model, b.ids, tf.onesLike(b.ids).toFloat() as tf.Tensor2D),
      );
      trainer.step();
    }
    assert.ok(maxAbsDiff(logitsOf(m2), logitsOf(m)) < 1e-6, 'resumed step equals the original');
    assert.ok(!existsSync(join(dir, 'ckpt', 'model.safetensors')));
    [t, t2].forEach((x) => x.dispose());
    [m, m2].forEach((x) => x.dispose());
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an adapter that does not fit the model is refused, naming the tensor', async () => {
  await initBackend('cpu');
  const m = randomModel(tinyLlamaConfig(), 12);
  const other = randomModel(tinyLlamaConfig({ hidden_size: 32, num_attention_heads: 4 }), 1);
  other.attachLora(lora(), { seed: 1 });
  const a = other.lora!.exportAdapter();
  m.attachLora(lora(), { seed: 1 });
  assert.throws(() => m.lora!.importAdapter(a), /lora_A\.weight is \[4,32\]/);
  [m, other].forEach((x) => x.dispose());
});

test.run();
