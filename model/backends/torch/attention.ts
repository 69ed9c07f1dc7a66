/**
 * The model's composite ops on the `torch` backend, registered in `../../backend-ops.ts`. The
 * fused attention: one libtorch kernel each (rotary,
 * grouped-query attention through `at::scaled_dot_product_attention` on libtorch >= 2, composed
 * ops on 1.13), the gradient by libtorch's autograd over a recomputed forward. Same inputs and
 * outputs as `fusedAttention` and `fusedAttentionWithCache` in `model/attention.ts`, and
 * decoding's attention over the KV cache in one kernel (`withPast`). And the
 * trainer's AdamW update as one kernel.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import {
  adamwImpls,
  attentionImpls,
  attentionLimits,
  sumOfSquaresImpls,
  targetLogprobImpls,
  type AttentionHeads,
  type AttentionOps,
} from '../../backend-ops.ts';

/** The attention kernels' attributes: the head counts and the scores one block may hold. */
const attnAttrs = (heads: AttentionHeads): tf.NamedAttrMap =>
  ({ ...heads, maxScores: attentionLimits.maxScores }) as unknown as tf.NamedAttrMap;

const torchFused: AttentionOps['fused'] = (q, k, v, cos, sin, bias, heads) => {
  const attrs = attnAttrs(heads);
  const fn = tf.customGrad(((
    qT: tf.Tensor,
    kT: tf.Tensor,
    vT: tf.Tensor,
    cT: tf.Tensor,
    sT: tf.Tensor,
    bT: tf.Tensor,
    save: tf.GradSaveFunc,
  ) => {
    const inputs = { q: qT, k: kT, v: vT, cos: cT, sin: sT, bias: bT };
    const value = tf.engine().runKernel('RtjobTorchAttention', inputs, attrs) as tf.Tensor;
    // Intermediate tensors are freed after the forward pass unless saved for the backward one.
    save([qT, kT, vT, cT, sT, bT]);
    return {
      value,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [q, k, v, cos, sin, bias] = saved as [
          tf.Tensor,
          tf.Tensor,
          tf.Tensor,
          tf.Tensor,
          tf.Tensor,
          tf.Tensor,
        ];
        const [dq, dk, dv] = tf
          .engine()
          .runKernel(
            'RtjobTorchAttentionGrad',
            { q, k, v, cos, sin, bias, dy },
            attrs,
          ) as tf.Tensor[];
        return [dq!, dk!, dv!, tf.zerosLike(cos), tf.zerosLike(sin), tf.zerosLike(bias)];
      },
    };
  }) as unknown as Parameters<typeof tf.customGrad>[0]) as unknown as (
    ...xs: tf.Tensor[]
  ) => tf.Tensor3D;
  return fn(q, k, v, cos, sin, bias);
};

const torchWithCache: AttentionOps['withCache'] = (q, k, v, cos, sin, bias, heads) => {
  const [out, kc, vc] = tf
    .engine()
    .runKernel(
      'RtjobTorchAttentionCache',
      { q, k, v, cos, sin, bias },
      attnAttrs(heads),
    ) as tf.Tensor[];
  return { out: out as tf.Tensor3D, k: kc as tf.Tensor4D, v: vc as tf.Tensor4D };
};

const torchWithPast: NonNullable<AttentionOps['withPast']> = (
  q,
  k,
  v,
  cos,
  sin,
  bias,
  pastK,
  pastV,
  heads,
) => {
  const [out, kc, vc] = tf
    .engine()
    .runKernel(
      'RtjobTorchAttentionPast',
      { q, k, v, cos, sin, bias, pastK, pastV },
      attnAttrs(heads),
    ) as tf.Tensor[];
  return { out: out as tf.Tensor3D, k: kc as tf.Tensor4D, v: vc as tf.Tensor4D };
};

attentionImpls.set('torch', {
  fused: torchFused,
  withCache: torchWithCache,
  withPast: torchWithPast,
});

// AdamW for the trainer: one kernel per parameter instead of about twelve (no gradient flows).
adamwImpls.set('torch', (p, m, v, g, s) => {
  const [np, nm, nv] = tf.engine().runKernel('RtjobTorchAdamW', { p, m, v, g }, {
    ...s,
  } as unknown as tf.NamedAttrMap) as tf.Tensor[];
  return [np!, nm!, nv!];
});

// The squared global gradient norm: one kernel over every gradient, no squared copies.
sumOfSquaresImpls.set(
  'torch',
  (ts) =>
    tf
      .engine()
      .runKernel('RtjobTorchSumSquares', ts as unknown as tf.NamedTensorMap, {}) as tf.Scalar,
);

// The next-token logprob: logits[target] - logsumexp(logits), and its gradient, one kernel each.
targetLogprobImpls.set('torch', (logits, targets) => {
  const fn = tf.customGrad(((x: tf.Tensor, t: tf.Tensor, save: tf.GradSaveFunc) => {
    save([x, t]);
    const value = tf.engine().runKernel('RtjobTorchTargetLogprob', { x, t }, {}) as tf.Tensor;
    return {
      value,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [xs, ts] = saved as [tf.Tensor, tf.Tensor];
        const dx = tf
          .engine()
          .runKernel('RtjobTorchTargetLogprobGrad', { x: xs, t: ts, dy }, {}) as tf.Tensor;
        return [dx, tf.zerosLike(ts)];
      },
    };
  }) as unknown as Parameters<typeof tf.customGrad>[0]) as unknown as (
    ...xs: tf.Tensor[]
  ) => tf.Tensor2D;
  return fn(logits, targets);
});
