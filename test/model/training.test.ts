import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import { learningRate } from '../../model/lr-schedule.ts';
import { forwardLogprobs } from '../../model/sequence-logprobs.ts';
import { maskedNllLoss, ModelTrainer, padBatch, tokenStats } from '../../model/training.ts';
import { maxAbsDiff, randomModel, tinyLlamaConfig } from '../fixtures/model/tiny.ts';

const seqs = [
  [1, 2, 3, 4, 5, 6],
  [7, 8, 9, 10, 11, 12],
  [3, 3, 3, 3, 3, 3],
  [20, 19, 18, 17, 16, 15],
];

test("learning rate: HF get_scheduler's shapes, warmup from 0, decay over the rest", () => {
  const o = { lr: 1, warmupSteps: 10, totalSteps: 110 };
  const near = (a: number, b: number, what: string) =>
    assert.ok(Math.abs(a - b) < 1e-12, `${what}: ${a} vs ${b}`);
  // cosine_with_min_lr (the default): half a cosine from lr to 0.1 × lr.
  assert.is(learningRate(o, 0), 0, 'the first warmup step has rate 0, as a LambdaLR at step 0');
  near(learningRate(o, 5), 0.5, 'half way through warmup');
  near(learningRate(o, 10), 1, 'warmup done');
  near(learningRate(o, 60), 0.55, 'half way down: 0.1 + 0.9 × 0.5');
  near(learningRate(o, 110), 0.1, 'the floor');
  near(learningRate(o, 500), 0.1, 'past the end it stays at the floor');
  near(learningRate({ ...o, minLrRatio: 0.5 }, 110), 0.5, '--min-lr-ratio');
  near(learningRate({ ...o, scheduler: 'cosine' }, 60), 0.5, 'cosine: to 0');
  near(learningRate({ ...o, scheduler: 'cosine' }, 110), 0, 'cosine: to 0');
  near(learningRate({ ...o, scheduler: 'linear' }, 35), 0.75, 'linear: (110 − 35) / 100');
  near(learningRate({ ...o, scheduler: 'linear' }, 110), 0, 'linear: to 0');
  near(learningRate({ ...o, scheduler: 'constant_with_warmup' }, 5), 0.5, 'warmup');
  near(learningRate({ ...o, scheduler: 'constant_with_warmup' }, 100), 1, 'then constant');
  near(learningRate({ ...o, scheduler: 'constant' }, 0), 1, 'constant ignores warmup, as HF');
  near(learningRate({ lr: 2 }, 1000), 2, 'no totalSteps: no decay');
});

test('gradient accumulation over micro-batches equals one full batch (mean of equal-size micro-batch losses)', async () => {
  await initBackend('wasm');
  const a = randomModel(tinyLlamaConfig(), 41);
  const b = randomModel(tinyLlamaConfig(), 41);
  const opts = { lr: 5e-3, maxGradNorm: 0 };
  const ta = new ModelTrainer(a, opts);
  const tb = new ModelTrainer(b, opts);
  const full = padBatch(seqs);
  const ones = (t: tf.Tensor2D): tf.Tensor2D => tf.onesLike(t).toFloat() as tf.Tensor2D;
  ta.accumulate(() => maskedNllLoss(a, full.ids, ones(full.ids)));
  const sa = ta.step();
  for (const half of [seqs.slice(0, 2), seqs.slice(2)]) {
    const p = padBatch(half);
    tb.accumulate(() => maskedNllLoss(b, p.ids, ones(p.ids)));
  }
  const sb = tb.step();
  assert.is(sb.microBatches, 2);
  assert.ok(Math.abs(sa.gradNorm - sb.gradNorm) < 1e-4 * sa.gradNorm);
  const wa = a.exportWeights();
  const wb = b.exportWeights();
  for (const k of Object.keys(wa)) assert.ok(maxAbsDiff(wa[k]!.data, wb[k]!.data) < 1e-5, k);
  [ta, tb, a, b].forEach((x) => x.dispose());
});

test('clipping by global norm caps the update; AdamW first step moves each weight by about lr', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig(), 42);
  const before = m.exportWeights();
  const t = new ModelTrainer(m, { lr: 1e-3, maxGradNorm: 1e-3, weightDecay: 0 });
  const p = padBatch(seqs);
  t.accumulate(() => maskedNllLoss(m, p.ids, tf.onesLike(p.ids).toFloat() as tf.Tensor2D));
  const st = t.step();
  assert.ok(st.gradNorm > 1e-3, 'reported norm is before clipping');
  // Adam normalises the step, so the first step is ≈ lr·sign(g) whatever the clipping
  const after = m.exportWeights();
  const d = maxAbsDiff(before['model.norm.weight']!.data, after['model.norm.weight']!.data);
  assert.ok(d > 0.5e-3 && d <= 1.01e-3, `step ${d}`);
  t.dispose();
  m.dispose();
});

test('AdamW with weight decay matches the textbook update over 2 steps and holds no memory beyond weights and moments', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig({ num_hidden_layers: 1 }), 45);
  const o = { lr: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, maxGradNorm: 0 };
  const names = ['model.embed_tokens.weight', 'model.norm.weight'];
  const p0 = m.exportWeights();
  const t = new ModelTrainer(m, o);
  const { numBytes, numDataBuffers } = tf.memory();
  // loss = Σ c·p over two parameters, so each gradient is the constant c of its step
  const cs = [0.5, -2];
  for (const c of cs) {
    t.accumulate(() => tf.addN(names.map((n) => tf.sum(tf.mul(m.params.get(n)!, c)))).asScalar());
    t.step();
    // a buffer kept would be a gradient, a temporary, or the moments' initial zeros
    assert.equal(
      { numBytes: tf.memory().numBytes, numDataBuffers: tf.memory().numDataBuffers },
      { numBytes, numDataBuffers },
    );
  }
  const after = m.exportWeights();
  for (const n of names) {
    const decays = p0[n]!.shape.length >= 2;
    const want = Float32Array.from(p0[n]!.data, (x) => {
      let [p, mo, v] = [x, 0, 0];
      cs.forEach((g, i) => {
        mo = o.beta1 * mo + (1 - o.beta1) * g;
        v = o.beta2 * v + (1 - o.beta2) * g * g;
        const upd =
          mo / (1 - o.beta1 ** (i + 1)) / (Math.sqrt(v / (1 - o.beta2 ** (i + 1))) + o.eps);
        p = (decays ? p * (1 - o.lr * o.weightDecay) : p) - o.lr * upd;
      });
      return p;
    });
    assert.ok(maxAbsDiff(after[n]!.data, want) < 1e-6, n);
  }
  t.dispose();
  m.dispose();
});

test('forwardLogprobs aligns with trajectories and matches tokenStats; entropy and values', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig(), 43, { valueHead: true });
  const ragged = [
    [1, 2, 3],
    [4, 5, 6, 7, 8],
  ];
  const r = await forwardLogprobs(m, ragged, { entropy: true, values: true, microBatchSize: 1 });
  assert.equal(
    r.logprobs.map((x) => x.length),
    [3, 5],
  );
  assert.is(r.logprobs[0]![0], 0);
  const direct = tf.tidy(() =>
    tokenStats(m, tf.tensor2d([ragged[1]!], [1, 5], 'int32')).logprobs.dataSync(),
  );
  assert.ok(maxAbsDiff(r.logprobs[1]!.slice(1), direct) < 1e-5);
  assert.ok(
    r.entropy![1]!.slice(1).every((e) => e > 0 && e <= Math.log(m.config.vocab_size) + 1e-4),
  );
  assert.is(r.values![1]!.length, 5);
  m.dispose();
});

test('no tensor leaks: numTensors is flat over 200 train steps and repeated generation', async () => {
  await initBackend('wasm');
  const m = randomModel(tinyLlamaConfig({ num_hidden_layers: 1 }), 44);
  const t = new ModelTrainer(m, { lr: 1e-3, warmupSteps: 5, totalSteps: 200, weightDecay: 0.01 });
  const step = (): void => {
    t.accumulate(() => {
      const p = padBatch(seqs.slice(0, 2));
      return maskedNllLoss(m, p.ids, tf.onesLike(p.ids).toFloat() as tf.Tensor2D);
    });
    t.step();
  };
  step();
  const base = tf.memory().numTensors;
  for (let i = 0; i < 200; i++) step();
  assert.is(tf.memory().numTensors, base);
  const engine = await BuiltinEngine.create({ model: m, eosTokenIds: [] });
  await engine.generate({ inputIds: [1, 2], gconfig: { maxNewTokens: 4 } });
  const e0 = tf.memory().numTensors;
  for (let i = 0; i < 5; i++) {
    await Promise.all(
      [1, 2, 3].map((k) =>
        engine.generate({ inputIds: [k, k + 1], gconfig: { maxNewTokens: 5 + k } }),
      ),
    );
    await forwardLogprobs(m, seqs);
  }
  assert.is(tf.memory().numTensors, e0);
  await engine.close();
  t.dispose();
  m.dispose();
});

test.run();
