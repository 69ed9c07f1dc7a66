/**
 * Per-backend implementations of the model's own composite ops, by TF.js backend name: a backend
 * module (e.g. `backends/torch/`) registers here, and `attention.ts` / `training.ts` use an entry
 * when the backend in use has one, their portable code otherwise. This module imports nothing of
 * the model, so a backend can register without an import circle.
 *
 * @module
 */
import type * as tf from '@tensorflow/tfjs';

/** Head counts of the fused attention. */
export interface AttentionHeads {
  H: number;
  KV: number;
  hd: number;
}

/** The two attention ops of `attention.ts`, with the same inputs and outputs. */
export interface AttentionOps {
  fused(
    q: tf.Tensor3D,
    k: tf.Tensor3D,
    v: tf.Tensor3D,
    cos: tf.Tensor3D,
    sin: tf.Tensor3D,
    bias: tf.Tensor3D,
    heads: AttentionHeads,
  ): tf.Tensor3D;
  withCache(
    q: tf.Tensor3D,
    k: tf.Tensor3D,
    v: tf.Tensor3D,
    cos: tf.Tensor3D,
    sin: tf.Tensor3D,
    bias: tf.Tensor3D,
    heads: AttentionHeads,
  ): { out: tf.Tensor3D; k: tf.Tensor4D; v: tf.Tensor4D };
  /**
   * Decoding (optional): {@link withCache} for `T` new tokens after a cache `pastK`/`pastV`
   * `[B, KV, Tp, hd]` (rotated keys, values); `bias` is `[B or 1, T, Tp + T]` and the returned
   * `k`/`v` are the grown cache `[B, KV, Tp + T, hd]`. No gradient. Where a backend has it, the
   * model's cached forward runs it instead of the composed attention.
   */
  withPast?(
    q: tf.Tensor3D,
    k: tf.Tensor3D,
    v: tf.Tensor3D,
    cos: tf.Tensor3D,
    sin: tf.Tensor3D,
    bias: tf.Tensor3D,
    pastK: tf.Tensor4D,
    pastV: tf.Tensor4D,
    heads: AttentionHeads,
  ): { out: tf.Tensor3D; k: tf.Tensor4D; v: tf.Tensor4D };
}

/**
 * The most attention scores (query head × query row × key) the torch backend's attention holds
 * at once where it computes them whole (on CPU, and with libtorch 1.13 anywhere; CUDA's fused
 * SDPA never does): above it the forward and the gradient run per kv head and run of query rows,
 * so a layer's `[B, H, T, T]` scores, probabilities and their gradients never exist whole.
 * 2^22 scores are 16 MiB of float32 per copy; a block's recomputed forward and gradient hold
 * about four copies (`attentionScoreCopies` in memory.ts). Tests lower it to run the blocks on
 * small shapes; 0 turns the blocks off.
 */
export const attentionLimits = { maxScores: 1 << 22 };

/** Attention by backend name. */
export const attentionImpls = new Map<string, AttentionOps>();

/** One AdamW update's scalars (`gs` scales the raw gradient: averaging and clipping). */
export interface AdamWScalars {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  /** Decoupled weight decay for this parameter (0 for norms and biases). */
  weightDecay: number;
  /** `1 - beta1^t`, `1 - beta2^t`. */
  bc1: number;
  bc2: number;
  gs: number;
}

/** A fused AdamW update: new parameter, first and second moments. */
export type AdamWUpdate = (
  p: tf.Tensor,
  m: tf.Tensor,
  v: tf.Tensor,
  g: tf.Tensor,
  s: AdamWScalars,
) => [tf.Tensor, tf.Tensor, tf.Tensor];

/** Fused AdamW by backend name. */
export const adamwImpls = new Map<string, AdamWUpdate>();

/**
 * `log_softmax(logits)[..., target]` for logits `[B, T, V]` and int32 targets `[B, T]`,
 * differentiable in the logits, without a `[B, T, V]` one-hot.
 */
export type TargetLogprob = (logits: tf.Tensor3D, targets: tf.Tensor2D) => tf.Tensor2D;

/** Target logprobs by backend name. */
export const targetLogprobImpls = new Map<string, TargetLogprob>();

/** The sum of squares of all `tensors` as one scalar (a global gradient norm's square). */
export type SumOfSquares = (tensors: tf.Tensor[]) => tf.Scalar;

/** Fused sum of squares by backend name (no squared copy of each tensor). */
export const sumOfSquaresImpls = new Map<string, SumOfSquares>();
