/**
 * The model's fused attention ops on the `torch` backend: one libtorch kernel each (rotary,
 * grouped-query attention through `at::scaled_dot_product_attention` on libtorch >= 2, composed
 * ops on 1.13), the gradient by libtorch's autograd over a recomputed forward. Same inputs and
 * outputs as {@link fusedAttention} and {@link fusedAttentionWithCache}.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import {
  attentionImpls,
  type fusedAttention,
  type fusedAttentionWithCache,
} from '../../attention.ts';

type Heads = { H: number; KV: number; hd: number };

const torchFused: typeof fusedAttention = (q, k, v, cos, sin, bias, heads) => {
  const attrs = { ...heads } as unknown as tf.NamedAttrMap;
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

const torchWithCache: typeof fusedAttentionWithCache = (q, k, v, cos, sin, bias, heads: Heads) => {
  const [out, kc, vc] = tf
    .engine()
    .runKernel('RtjobTorchAttentionCache', { q, k, v, cos, sin, bias }, {
      ...heads,
    } as unknown as tf.NamedAttrMap) as tf.Tensor[];
  return { out: out as tf.Tensor3D, k: kc as tf.Tensor4D, v: vc as tf.Tensor4D };
};

attentionImpls.set('torch', { fused: torchFused, withCache: torchWithCache });
