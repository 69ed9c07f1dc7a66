/**
 * Replacements for three kernels of the TF.js wasm backend that dominate a training step of a
 * small model there; installed on import, they change no result beyond float rounding.
 *
 * - `BatchMatMul` with a batch (attention products) or a transposed operand: the backend runs
 *   these through a scalar loop whose inner index strides across rows (~0.5 GFLOP/s; its fast
 *   XNNPACK path takes only unbatched, untransposed products). Here they run as dot products
 *   over contiguous rows in blocks of 2 x 4 outputs, about twice as fast. Unbatched untransposed
 *   products still go to XNNPACK.
 * - `Identity`: the backend copies; TF.js clones every tensor it saves for the backward pass,
 *   so a training step copied each activation once more. Tensors are immutable, so the clone
 *   can share the buffer (as `Reshape` already does).
 * - `Cast` to the same dtype (every `Multiply` gradient casts its operands to float32): shared
 *   likewise instead of copied.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import type { BackendWasm } from '@tensorflow/tfjs-backend-wasm';

type KernelArgs = Parameters<tf.KernelFunc>[0];
type Info = tf.TensorInfo;

let scratchA = new Float32Array(0);
let scratchB = new Float32Array(0);

/** `dst[n, r, c] = src[n, c, r]` for `batch` matrices of `rows x cols` (src is `[cols, rows]`). */
function transposeInto(
  src: Float32Array,
  dst: Float32Array,
  batch: number,
  rows: number,
  cols: number,
): void {
  for (let n = 0; n < batch; n++) {
    const o = n * rows * cols;
    for (let c = 0; c < cols; c++) {
      const s = o + c * rows;
      for (let r = 0; r < rows; r++) dst[o + r * cols + c] = src[s + r]!;
    }
  }
}

/**
 * `c[n] = a[n] @ b[n]^T` with `a[n]` `[M, K]` and `b[n]` `[N, K]` row-major; a batch of 1 on
 * either side is broadcast. Blocks of 2 rows x 4 columns keep eight independent sums in
 * registers (six loads per eight multiply-adds), which V8 runs about 1.7x faster than one row.
 */
function matMulNT(
  a: Float32Array,
  aBatch: number,
  b: Float32Array,
  bBatch: number,
  c: Float32Array,
  batch: number,
  M: number,
  K: number,
  N: number,
): void {
  for (let n = 0; n < batch; n++) {
    const aO = (aBatch === 1 ? 0 : n) * M * K;
    const bO = (bBatch === 1 ? 0 : n) * N * K;
    const cO = n * M * N;
    let i = 0;
    for (; i + 2 <= M; i += 2) {
      const a0 = aO + i * K;
      const a1 = a0 + K;
      const c0 = cO + i * N;
      const c1 = c0 + N;
      let j = 0;
      for (; j + 4 <= N; j += 4) {
        const b0 = bO + j * K;
        const b1 = b0 + K;
        const b2 = b1 + K;
        const b3 = b2 + K;
        let s00 = 0,
          s01 = 0,
          s02 = 0,
          s03 = 0,
          s10 = 0,
          s11 = 0,
          s12 = 0,
          s13 = 0;
        for (let k = 0; k < K; k++) {
          const x0 = a[a0 + k]!;
          const x1 = a[a1 + k]!;
          const y0 = b[b0 + k]!;
          const y1 = b[b1 + k]!;
          const y2 = b[b2 + k]!;
          const y3 = b[b3 + k]!;
          s00 += x0 * y0;
          s01 += x0 * y1;
          s02 += x0 * y2;
          s03 += x0 * y3;
          s10 += x1 * y0;
          s11 += x1 * y1;
          s12 += x1 * y2;
          s13 += x1 * y3;
        }
        c[c0 + j] = s00;
        c[c0 + j + 1] = s01;
        c[c0 + j + 2] = s02;
        c[c0 + j + 3] = s03;
        c[c1 + j] = s10;
        c[c1 + j + 1] = s11;
        c[c1 + j + 2] = s12;
        c[c1 + j + 3] = s13;
      }
      for (; j < N; j++) {
        const b0 = bO + j * K;
        let s0 = 0;
        let s1 = 0;
        for (let k = 0; k < K; k++) {
          s0 += a[a0 + k]! * b[b0 + k]!;
          s1 += a[a1 + k]! * b[b0 + k]!;
        }
        c[c0 + j] = s0;
        c[c1 + j] = s1;
      }
    }
    for (; i < M; i++) {
      const ai = aO + i * K;
      for (let j = 0; j < N; j++) {
        const b0 = bO + j * K;
        let s = 0;
        for (let k = 0; k < K; k++) s += a[ai + k]! * b[b0 + k]!;
        c[cO + i * N + j] = s;
      }
    }
  }
}

const prod = (xs: number[]): number => xs.reduce((p, x) => p * x, 1);

/** The backend's own kernels, kept for fallbacks and for {@link useWasmKernelOverrides}(false). */
const original = new Map<string, tf.KernelConfig>();
for (const name of ['BatchMatMul', 'Identity', 'Cast']) {
  const k = tf.getKernel(name, 'wasm');
  if (k) original.set(name, k);
}

function reregister(config: tf.KernelConfig): void {
  tf.unregisterKernel(config.kernelName, 'wasm');
  tf.registerKernel(config);
}

let enabled = false;

/**
 * Turns the replacements on (the default once this module is imported) or back to the backend's
 * own kernels, e.g. to measure both in one benchmark run.
 */
export function useWasmKernelOverrides(on: boolean): void {
  if (on === enabled || original.size !== 3) return;
  enabled = on;
  if (!on) {
    original.forEach(reregister);
    return;
  }
  const bmm = original.get('BatchMatMul')!;
  const identity = original.get('Identity')!;
  const cast = original.get('Cast')!;

  const share = (backend: BackendWasm, x: Info): Info => {
    backend.incRef(x.dataId);
    return { dataId: x.dataId, shape: [...x.shape], dtype: x.dtype };
  };

  reregister({
    ...identity,
    kernelFunc: (args: KernelArgs) => {
      const x = (args.inputs as { x: Info }).x;
      return x.dtype === 'string'
        ? identity.kernelFunc(args)
        : share(args.backend as BackendWasm, x);
    },
  });

  reregister({
    ...cast,
    kernelFunc: (args: KernelArgs) => {
      const x = (args.inputs as { x: Info }).x;
      const { dtype } = args.attrs as unknown as { dtype: tf.DataType };
      return x.dtype === dtype && dtype !== 'string'
        ? share(args.backend as BackendWasm, x)
        : cast.kernelFunc(args);
    },
  });

  reregister({
    ...bmm,
    kernelFunc: (args: KernelArgs) => {
      const { a, b } = args.inputs as { a: Info; b: Info };
      const { transposeA, transposeB } = args.attrs as unknown as {
        transposeA: boolean;
        transposeB: boolean;
      };
      const aBatchShape = a.shape.slice(0, -2);
      const bBatchShape = b.shape.slice(0, -2);
      const aBatch = prod(aBatchShape);
      const bBatch = prod(bBatchShape);
      const sameBatch =
        aBatchShape.length === bBatchShape.length &&
        aBatchShape.every((d, i) => d === bBatchShape[i]);
      const plain = !transposeA && !transposeB && aBatch === 1 && bBatch === 1;
      if (
        plain ||
        a.dtype !== 'float32' ||
        b.dtype !== 'float32' ||
        !(sameBatch || aBatch === 1 || bBatch === 1)
      ) {
        return bmm.kernelFunc(args);
      }
      const ar = a.shape.length;
      const br = b.shape.length;
      const M = transposeA ? a.shape[ar - 1]! : a.shape[ar - 2]!;
      const K = transposeA ? a.shape[ar - 2]! : a.shape[ar - 1]!;
      const N = transposeB ? b.shape[br - 2]! : b.shape[br - 1]!;
      const batchShape = aBatch >= bBatch ? aBatchShape : bBatchShape;
      const batch = Math.max(aBatch, bBatch);
      const backend = args.backend as BackendWasm;
      const out = backend.makeOutput([...batchShape, M, N], 'float32');
      // Views after makeOutput, which may grow (and so detach) the wasm heap.
      let av = backend.typedArrayFromHeap(a) as Float32Array;
      let bv = backend.typedArrayFromHeap(b) as Float32Array;
      if (transposeA) {
        if (scratchA.length < av.length) scratchA = new Float32Array(av.length);
        transposeInto(av, scratchA, aBatch, M, K);
        av = scratchA;
      }
      if (!transposeB) {
        if (scratchB.length < bv.length) scratchB = new Float32Array(bv.length);
        transposeInto(bv, scratchB, bBatch, N, K);
        bv = scratchB;
      }
      matMulNT(
        av,
        aBatch,
        bv,
        bBatch,
        backend.typedArrayFromHeap(out) as Float32Array,
        batch,
        M,
        K,
        N,
      );
      return out;
    },
  });
}

useWasmKernelOverrides(true);
