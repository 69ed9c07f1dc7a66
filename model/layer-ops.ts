/**
 * Two of the decoder layer's composite ops, RMSNorm and SwiGLU's gated product, each as one
 * differentiable op for training passes. Composed from TF.js ops, autodiff keeps every
 * intermediate an op saves for its gradient: RMSNorm's normalized input besides its input and
 * output, SwiGLU's sigmoid and SiLU besides the gate and up products — per decoder layer and
 * token two hidden-sized tensors (with Qwen3's q/k norms one q-sized and one k-sized more) and
 * two intermediate-sized ones, about 88 MiB a layer of Qwen3-0.6B at 2,048 tokens. As one op each
 * keeps only its inputs and recomputes the rest in its gradient. The forward values are the
 * composed ops' (the same kernels in the same order); the gradients are the same functions in
 * fewer kernels, each temporary freed as soon as it is used, equal to autodiff of the composed
 * ops within float rounding (tested).
 *
 * @module
 */
import { tf } from './backend.ts';

type GradFn = Parameters<typeof tf.customGrad>[0];

/** Frees temporaries of a gradient as soon as they are used (a tidy would keep all to its end). */
const free = (...ts: tf.Tensor[]): void => tf.dispose(ts);

/** `x · rsqrt(mean(x², last axis) + eps) · w`, composed (inference, and the op's forward). */
export function rmsNormValue(x: tf.Tensor, w: tf.Tensor, eps: number): tf.Tensor {
  const variance = tf.mean(tf.square(x), -1, true);
  return tf.mul(tf.mul(x, tf.rsqrt(tf.add(variance, eps))), w);
}

/**
 * {@link rmsNormValue} as one op that saves `x` and `w`. With `g = dy·w`, `r` the reciprocal
 * root and `n = x·r`: `dx = r·(g − n·mean(g·n))`, `dw = Σ_rows dy·n`.
 */
export function rmsNormOp(x: tf.Tensor, w: tf.Tensor, eps: number): tf.Tensor {
  const fn = tf.customGrad(((xT: tf.Tensor, wT: tf.Tensor, save: tf.GradSaveFunc) => {
    save([xT, wT]);
    return {
      value: rmsNormValue(xT, wT, eps),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [x0, w0] = saved as [tf.Tensor, tf.Tensor];
        const r = tf.tidy(() => tf.rsqrt(tf.add(tf.mean(tf.square(x0), -1, true), eps)));
        const n = tf.mul(x0, r);
        const width = w0.shape[w0.shape.length - 1]!;
        const dw = tf.tidy(() =>
          tf.reshape(tf.sum(tf.reshape(tf.mul(dy, n), [-1, width]), 0), w0.shape),
        );
        const g = tf.mul(dy, w0);
        const m = tf.tidy(() => tf.mean(tf.mul(g, n), -1, true));
        const nm = tf.mul(n, m);
        free(n, m);
        const gnm = tf.sub(g, nm);
        free(g, nm);
        const dx = tf.mul(r, gnm);
        free(r, gnm);
        return [dx, dw];
      },
    };
  }) as unknown as GradFn) as unknown as (x: tf.Tensor, w: tf.Tensor) => tf.Tensor;
  return fn(x, w);
}

/** `silu(gate) · up` = `gate · sigmoid(gate) · up`, composed (inference, and the op's forward). */
export function swigluValue(gate: tf.Tensor, up: tf.Tensor): tf.Tensor {
  return tf.mul(tf.mul(gate, tf.sigmoid(gate)), up);
}

/**
 * {@link swigluValue} as one op that saves `gate` and `up`. With `s = sigmoid(gate)`:
 * `dup = dy·gate·s`, `dgate = dy·up·s·(1 + gate·(1 − s))` (autodiff of the composed ops sums
 * the same function as two terms).
 */
export function swigluOp(gate: tf.Tensor, up: tf.Tensor): tf.Tensor {
  const fn = tf.customGrad(((gT: tf.Tensor, uT: tf.Tensor, save: tf.GradSaveFunc) => {
    save([gT, uT]);
    return {
      value: swigluValue(gT, uT),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [g0, u0] = saved as [tf.Tensor, tf.Tensor];
        // dgate = dy·up·s·(1 + gate·(1 − s)): each temporary is freed once used, so at most
        // four of the input's size are alive at a time.
        const s = tf.sigmoid(g0);
        const silu = tf.mul(g0, s);
        const dUp = tf.mul(dy, silu);
        silu.dispose();
        const one = tf.scalar(1);
        const oneMinusS = tf.sub(one, s);
        const gateOneMinusS = tf.mul(g0, oneMinusS);
        oneMinusS.dispose();
        const factor = tf.add(gateOneMinusS, one);
        free(gateOneMinusS, one);
        const dSiluDGate = tf.mul(s, factor);
        free(s, factor);
        const dSilu = tf.mul(dy, u0);
        const dGate = tf.mul(dSilu, dSiluDGate);
        free(dSilu, dSiluDGate);
        return [dGate, dUp];
      },
    };
  }) as unknown as GradFn) as unknown as (gate: tf.Tensor, up: tf.Tensor) => tf.Tensor;
  return fn(gate, up);
}
