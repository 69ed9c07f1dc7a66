/**
 * The training pass's backward walk (`freeingGrads`, model/recompute.ts) and the layer's single
 * ops (model/layer-ops.ts), on the cpu oracle and on the torch backend:
 * - the walk gives `tf.variableGrads`'s loss and gradients bit for bit (the same kernels in the
 *   same order), leaves no tensor behind, and frees as it goes back (TF.js's own walk holds every
 *   saved tensor and gradient to its end), so its peak of tensor bytes is far lower;
 * - RMSNorm and SwiGLU as single ops have the composed ops' values bit for bit and their autodiff
 *   gradients within 1e-5 of the largest;
 * - with LoRA dropout a checkpointed layer's recomputation draws its forward's masks: gradients
 *   equal the plain pass's;
 * - the trainer refuses a loss that is not a scalar or reaches no trained parameter, in one line.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf, type BackendName } from '../../model/backend.ts';
import { resolveConfig } from '../../model/config.ts';
import { rmsNormOp, rmsNormValue, swigluOp, swigluValue } from '../../model/layer-ops.ts';
import { parseTargetModules } from '../../model/lora-adapter.ts';
import { freeingGrads } from '../../model/recompute.ts';
import { maskedNllLoss, ModelTrainer, padBatch } from '../../model/training.ts';
import { activationHeavyModel, randomModel, tinyFamilyConfigs } from '../fixtures/model/tiny.ts';

const qwen3 = resolveConfig(
  tinyFamilyConfigs()['qwen3 v4 (q/k norm, head_dim 8 decoupled from hidden 16, tied)']!,
);
const seqs = [
  [1, 2, 3, 4, 5, 6, 7, 8, 9],
  [11, 12, 13],
  [20, 3, 21, 22, 5, 6],
];

/** The batch's ids and a mask of its real tokens. */
function batchOf(): { ids: tf.Tensor2D; mask: tf.Tensor2D } {
  const batch = padBatch(seqs);
  const mask = tf.tensor2d(
    seqs.flatMap((s) => Array.from({ length: batch.T }, (_, t) => (t > 0 && t < s.length ? 1 : 0))),
    [seqs.length, batch.T],
  );
  return { ids: batch.ids, mask };
}

const bits = (a: Float32Array): string =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('hex');

function maxRelDiff(got: Float32Array, want: Float32Array): number {
  let scale = 0;
  let diff = 0;
  for (let i = 0; i < want.length; i++) {
    scale = Math.max(scale, Math.abs(want[i]!));
    diff = Math.max(diff, Math.abs(got[i]! - want[i]!));
  }
  return diff / scale;
}

for (const backend of ['cpu', 'torch'] as BackendName[]) {
  test(`${backend}: the freeing walk gives tf.variableGrads's loss and gradients bit for bit`, async () => {
    await initBackend(backend);
    const m = randomModel(qwen3, 5);
    const { ids, mask } = batchOf();
    const vars = [...m.params.values()];
    const want = tf.variableGrads(() => maskedNllLoss(m, ids, mask), vars);
    const before = tf.memory().numTensors;
    const got = freeingGrads(() => maskedNllLoss(m, ids, mask), vars);
    assert.is(tf.memory().numTensors, before + 1 + vars.length, 'the loss and one gradient each');
    assert.is(got.value.dataSync()[0], want.value.dataSync()[0]);
    vars.forEach((v, i) => {
      const g = got.grads[i];
      assert.ok(g, `${v.name} has a gradient`);
      assert.is(
        bits(g.dataSync() as Float32Array),
        bits(want.grads[v.name]!.dataSync() as Float32Array),
        v.name,
      );
    });
    tf.dispose([got.value, want.value, ...Object.values(want.grads)]);
    tf.dispose(got.grads.filter((g) => g !== undefined));
    assert.is(tf.memory().numTensors, before - 1 - vars.length, 'nothing else outlives the pass');
    tf.dispose([ids, mask]);
    m.dispose();
  });

  test(`${backend}: the freeing walk frees as it goes back: its peak of tensor bytes is far below tf.variableGrads's`, async () => {
    await initBackend(backend);
    const { model: m, ids, mask } = activationHeavyModel();
    const vars = [...m.params.values()];
    // Peak and last tensor bytes of a pass (tf.profile hands back the engine's one profile
    // object: read it before the next; it counts a saved tensor's handle as bytes of its own).
    const profile = async (walk: () => { value: tf.Tensor; grads: (tf.Tensor | undefined)[] }) => {
      const p = await tf.profile(() => {
        const { value, grads } = walk();
        tf.dispose([value, ...grads.filter((g) => g !== undefined)]);
      });
      return { peak: p.peakBytes, last: p.kernels[p.kernels.length - 1]!.totalBytesSnapshot };
    };
    const tfjs = await profile(() => {
      const { value, grads } = tf.variableGrads(() => maskedNllLoss(m, ids, mask), vars);
      return { value, grads: Object.values(grads) };
    });
    const freeing = await profile(() => freeingGrads(() => maskedNllLoss(m, ids, mask), vars));
    process.stderr.write(
      `  ${backend} tensor bytes, peak and at the last kernel: tf.variableGrads ${tfjs.peak}, ${tfjs.last}; freeing walk ${freeing.peak}, ${freeing.last}\n`,
    );
    // TF.js's walk holds everything to its end; this one frees as it goes back.
    assert.ok(tfjs.last > 0.9 * tfjs.peak, `tf.variableGrads ${tfjs.last} of ${tfjs.peak}`);
    assert.ok(freeing.last < 0.3 * freeing.peak, `freeing walk ${freeing.last} of ${freeing.peak}`);
    assert.ok(freeing.peak < 0.6 * tfjs.peak, `${freeing.peak} vs ${tfjs.peak}`);
    tf.dispose([ids, mask]);
    m.dispose();
  });

  test(`${backend}: RMSNorm and SwiGLU as single ops: the composed values, and their gradients`, async () => {
    await initBackend(backend);
    const x = tf.randomNormal([3, 5, 16], 0, 1, 'float32', 1);
    const w = tf.randomNormal([16], 1, 0.2, 'float32', 2);
    const up = tf.randomNormal([3, 5, 16], 0, 1, 'float32', 3);
    const dy = tf.randomNormal([3, 5, 16], 0, 1, 'float32', 4);
    const cases: [
      string,
      (a: tf.Tensor, b: tf.Tensor) => tf.Tensor,
      (a: tf.Tensor, b: tf.Tensor) => tf.Tensor,
      tf.Tensor,
    ][] = [
      ['rmsNorm', (a, b) => rmsNormOp(a, b, 1e-6), (a, b) => rmsNormValue(a, b, 1e-6), w],
      ['swiglu', swigluOp, swigluValue, up],
    ];
    for (const [name, op, composed, second] of cases) {
      const value = (f: typeof op) => tf.tidy(() => f(x, second).dataSync() as Float32Array);
      assert.is(bits(value(op)), bits(value(composed)), `${name}: forward`);
      const grads = (f: typeof op) =>
        tf.tidy(() =>
          tf
            .grads((a: tf.Tensor, b: tf.Tensor) => tf.sum(tf.mul(f(a, b), dy)))([x, second])
            .map((g) => g.dataSync() as Float32Array),
        );
      const [gotX, gotB] = grads(op);
      const [wantX, wantB] = grads(composed);
      assert.ok(maxRelDiff(gotX!, wantX!) < 1e-5, `${name}: input gradient`);
      assert.ok(maxRelDiff(gotB!, wantB!) < 1e-5, `${name}: second input's gradient`);
    }
    tf.dispose([x, w, up, dy]);
  });
}

test('torch: with LoRA dropout a checkpointed layer draws its forward masks (gradients equal the plain pass)', async () => {
  await initBackend('torch');
  const gradsOf = (ckpt: boolean): Float32Array[] => {
    const m = randomModel(qwen3, 7);
    m.attachLora(
      {
        r: 4,
        alpha: 8,
        targetModules: parseTargetModules('all-linear'),
        dropout: 0.3,
        baseModel: '',
      },
      { seed: 1 },
    );
    // B is zero at first: give it values so dropped adapter inputs show in the gradients.
    tf.tidy(() =>
      m.lora!.vars.forEach((v) => v.assign(tf.randomNormal(v.shape, 0, 0.3, 'float32', 5))),
    );
    m.gradientCheckpointing = ckpt;
    const { ids, mask } = batchOf();
    const vars = [...m.lora!.vars.values()];
    const { value, grads } = freeingGrads(() => maskedNllLoss(m, ids, mask), vars);
    const out = grads.map((g) => g!.dataSync() as Float32Array);
    tf.dispose([value, ids, mask, ...grads.filter((g) => g !== undefined)]);
    m.dispose();
    return out;
  };
  const plain = gradsOf(false);
  const ckpt = gradsOf(true);
  plain.forEach((want, i) => assert.ok(maxRelDiff(ckpt[i]!, want) < 1e-5, `adapter matrix ${i}`));
});

test('the trainer refuses a loss that is not a scalar or reaches no trained parameter', async () => {
  await initBackend('cpu');
  const m = randomModel(qwen3, 3);
  const t = new ModelTrainer(m, { lr: 1e-3 });
  const before = tf.memory().numTensors;
  assert.throws(
    () => t.accumulate(() => tf.ones([2]) as unknown as tf.Scalar),
    (e: Error) => /must be a scalar, got rank 1/.test(e.message),
  );
  assert.throws(
    () => t.accumulate(() => tf.scalar(1)),
    (e: Error) => /does not depend on any trained parameter/.test(e.message),
  );
  assert.is(tf.memory().numTensors, before, 'nothing left behind');
  t.dispose();
  m.dispose();
});

test.run();
