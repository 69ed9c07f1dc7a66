import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { useWasmKernelOverrides } from '../../model/wasm-kernels.ts';

function product(
  aShape: number[],
  bShape: number[],
  tA: boolean,
  tB: boolean,
  seed: number,
): Float32Array {
  const values = (shape: number[], s: number): Float32Array =>
    Float32Array.from({ length: shape.reduce((p, d) => p * d, 1) }, (_, i) =>
      Math.sin(1.3 * i + s),
    );
  return tf.tidy(() => {
    const a = tf.tensor(values(aShape, seed), aShape);
    const b = tf.tensor(values(bShape, seed + 1), bShape);
    return tf.matMul(a, b, tA, tB).dataSync() as Float32Array;
  });
}

const cases: [number[], number[], boolean, boolean][] = [
  [[6, 7, 5], [6, 5, 9], false, false],
  [[6, 5, 7], [6, 5, 9], true, false],
  [[6, 7, 5], [6, 9, 5], false, true],
  [[6, 5, 7], [6, 9, 5], true, true],
  [[2, 3, 7, 24], [2, 3, 24, 11], false, false], // rank 4, as in attention
  [[1, 7, 5], [4, 5, 3], false, false], // batch of one broadcast
  [[4, 1, 5], [4, 5, 1], false, false],
  [[13, 24], [6, 24], false, true], // unbatched but transposed
];

test('wasm batched and transposed products equal the cpu backend', async () => {
  for (const [i, [aShape, bShape, tA, tB]] of cases.entries()) {
    await initBackend('cpu');
    const want = product(aShape, bShape, tA, tB, 10 * i);
    await initBackend('wasm');
    const got = product(aShape, bShape, tA, tB, 10 * i);
    assert.is(got.length, want.length, `case ${i}`);
    for (let j = 0; j < want.length; j++)
      assert.ok(Math.abs(got[j]! - want[j]!) < 1e-5, `case ${i} [${j}]: ${got[j]} vs ${want[j]}`);
  }
});

test('the replacements agree with the backend kernels they replace, and free what they share', async () => {
  await initBackend('wasm');
  const before = tf.memory().numTensors;
  for (const [aShape, bShape, tA, tB] of cases) {
    useWasmKernelOverrides(false);
    const own = product(aShape, bShape, tA, tB, 3);
    useWasmKernelOverrides(true);
    const ours = product(aShape, bShape, tA, tB, 3);
    for (let j = 0; j < own.length; j++) assert.ok(Math.abs(ours[j]! - own[j]!) < 1e-5);
  }
  const x = tf.tensor1d([1, 2, 3]);
  const c = tf.clone(x);
  const f = tf.cast(x, 'float32');
  const n = tf.cast(x, 'int32');
  x.dispose();
  assert.equal(Array.from(c.dataSync()), [1, 2, 3]);
  assert.equal(Array.from(f.dataSync()), [1, 2, 3]);
  assert.equal(n.dtype, 'int32');
  c.dispose();
  f.dispose();
  n.dispose();
  assert.is(tf.memory().numTensors, before);
});

test.run();
