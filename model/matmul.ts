/**
 * Matrix products that avoid the transposed-operand paths of the wasm backend, which run about
 * 8x slower than plain products there (measured: 2.4 vs 19 GFLOP/s for [2048,96]x[96,256]).
 * On wasm, unbatched products transpose explicitly (a cheap op) so that they reach XNNPACK, and the
 * `BatchMatMul` gradient is re-registered with the same equations as TF.js's own but through
 * this function, so backward products take the fast path too. Batched products keep their flags:
 * `wasm-kernels.ts` runs them, transposed or not, at the same speed. (A custom-gradient wrapper would do the same but copies every
 * output, doubling activation memory.)
 *
 * @module
 */
import { tf } from './backend.ts';

function swapLast(t: tf.Tensor): tf.Tensor {
  const r = t.rank;
  if (r === 2) return tf.transpose(t);
  const perm = Array.from({ length: r }, (_, i) => i);
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  return tf.transpose(t, perm);
}

/** `a @ b`, with the last two axes of either operand transposed first when asked. */
export function matMul(
  a: tf.Tensor,
  b: tf.Tensor,
  transposeA = false,
  transposeB = false,
): tf.Tensor {
  // Batched products (attention) run in the wasm-kernels.ts kernel, which takes the flags as is;
  // other backends read transposed operands by stride, where an explicit transpose would only
  // copy (for a tied head, the whole embedding on every forward).
  if (a.rank > 2 || b.rank > 2 || tf.getBackend() !== 'wasm')
    return tf.matMul(a, b, transposeA, transposeB);
  return tf.matMul(transposeA ? swapLast(a) : a, transposeB ? swapLast(b) : b);
}

/** Kept for callers that mark inference paths; identical to {@link matMul}. */
export const matMulNoGrad = matMul;

tf.registerGradient({
  kernelName: 'BatchMatMul',
  inputsToSave: ['a', 'b'],
  gradFunc: (dy, saved, attrs) => {
    const [a, b] = saved as [tf.Tensor, tf.Tensor];
    const { transposeA, transposeB } = attrs as unknown as {
      transposeA: boolean;
      transposeB: boolean;
    };
    // The same cases as TF.js's BatchMatMul_grad, written with explicit transposes.
    const d = dy as tf.Tensor;
    if (!transposeA && !transposeB)
      return { a: () => matMul(d, b, false, true), b: () => matMul(a, d, true, false) };
    if (!transposeA && transposeB)
      return { a: () => matMul(d, b), b: () => matMul(d, a, true, false) };
    if (transposeA && !transposeB)
      return { a: () => matMul(b, d, false, true), b: () => matMul(a, d) };
    return { a: () => matMul(b, d, true, true), b: () => matMul(d, a, true, true) };
  },
});
