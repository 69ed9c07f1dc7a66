/**
 * Per-token logprobs, entropy and values of a batch, in-graph (for losses) through the model's
 * chunked vocabulary head when it has one, else from full logits.
 *
 * @module
 */
import { tf } from './backend.ts';
import { targetLogprobImpls } from './backend-ops.ts';
import type { PackedBatch } from './batches.ts';
import type { CausalLM } from './llama.ts';
import { assertTrainingPassRoom } from './memory.ts';

/** In-graph per-token quantities; position t describes token t+1 (the next-token prediction). */
export interface TokenStats {
  /** `[B, T-1]`: log p(token t+1 | tokens ≤ t) under softmax(logits / temperature). */
  logprobs: tf.Tensor2D;
  /** `[B, T-1]`: entropy of that tempered distribution (when asked). */
  entropy?: tf.Tensor2D;
  /** `[B, T-1]`: critic values at position t (value-head models, when asked). */
  values?: tf.Tensor2D;
}

/**
 * Logprobs of each next token under the tempered distribution, differentiable: use inside a loss.
 * The engine samples from the same softmax(logits / temperature), so with equal weights the two
 * agree (tested within 1e-4). With gradient checkpointing on (or `headChunkTokens` given) the LM
 * head runs over chunks of tokens (`CausalLM.chunkedHead`): one chunk's vocabulary-wide rows at a
 * time, recomputed in the backward pass; the same values and gradients (tested within 1e-5).
 */
export function tokenStats(
  model: CausalLM,
  ids: tf.Tensor2D,
  opts: {
    temperature?: number;
    entropy?: boolean;
    values?: boolean;
    grad?: boolean;
    /** A packed row's layout (`packBatch`): positions and attention bias of all T tokens. */
    packed?: Pick<PackedBatch, 'positions' | 'attnBias'>;
    /**
     * Tokens per chunk of the LM head (`CausalLM.chunkedHead`; 0: one pass over all tokens).
     * @default model.headChunkTokens with gradient checkpointing on, else 0
     */
    headChunkTokens?: number;
  } = {},
): TokenStats {
  const [B, T] = ids.shape;
  const V = model.config.vocab_size;
  const N = B * (T - 1);
  const fused = opts.entropy ? undefined : targetLogprobImpls.get(tf.getBackend());
  const chunk =
    opts.headChunkTokens ??
    (model.gradientCheckpointing && opts.grad !== false ? model.headChunkTokens : 0);
  const chunked = chunk > 0 && chunk < N;
  // Before the pass allocates: what its backward will need (the weights' side is the trainer's).
  if (opts.grad !== false)
    assertTrainingPassRoom(
      model.config,
      [B, T - 1],
      model.gradientCheckpointing,
      !!fused,
      chunked ? chunk : 0,
      model.lora?.config,
    );
  const input = tf.slice(ids, [0, 0], [B, T - 1]) as tf.Tensor2D;
  const out = model.forward(input, {
    grad: opts.grad,
    logits: !chunked,
    ...(opts.packed
      ? {
          positions: tf.slice(opts.packed.positions, [0, 0], [B, T - 1]) as tf.Tensor2D,
          attnBias: tf.slice(opts.packed.attnBias, [0, 0, 0], [B, T - 1, T - 1]) as tf.Tensor3D,
        }
      : {}),
  });
  const temperature = opts.temperature ?? 1;
  const targets = tf.slice(ids, [0, 1], [B, T - 1]) as tf.Tensor2D;
  // The next-token logprob (and entropy) of logits `[b, t, V]`: the one formula of both paths.
  const headStats = (logits: tf.Tensor3D, tg: tf.Tensor2D): TokenStats => {
    const scaled = (temperature === 1 ? logits : tf.div(logits, temperature)) as tf.Tensor3D;
    // One kernel each way where the backend has it: no vocabulary-sized one-hot or log-softmax.
    if (fused) return { logprobs: fused(scaled, tg) };
    const logp = tf.logSoftmax(scaled);
    // A one-hot product instead of a gather keeps the gradient on kernels every backend has.
    const stats: TokenStats = {
      logprobs: tf.sum(tf.mul(logp, tf.oneHot(tg, V)), -1) as tf.Tensor2D,
    };
    if (opts.entropy) stats.entropy = tf.neg(tf.sum(tf.mul(tf.exp(logp), logp), -1)) as tf.Tensor2D;
    return stats;
  };
  let stats: TokenStats;
  if (chunked) {
    // At most one chunk's vocabulary rows at once; each chunk's logits are recomputed in the backward.
    const rows = model.chunkedHead(
      tf.reshape(out.hidden, [N, model.config.hidden_size]) as tf.Tensor2D,
      tf.reshape(targets, [N]) as tf.Tensor1D,
      chunk,
      (logits, tg) => {
        const st = headStats(logits, tg);
        return (st.entropy ? tf.concat([st.logprobs, st.entropy], 0) : st.logprobs) as tf.Tensor2D;
      },
    );
    const row = (k: number): tf.Tensor2D =>
      tf.reshape(tf.slice(rows, [k, 0], [1, N]), [B, T - 1]) as tf.Tensor2D;
    stats = { logprobs: row(0) };
    if (opts.entropy) stats.entropy = row(1);
  } else stats = headStats(out.logits!, targets);
  if (opts.values) stats.values = model.values(out.hidden);
  return stats;
}

/**
 * Masked next-token cross-entropy (mean over masked tokens) for SFT: `lossMask[b][t]` = 1 where
 * token t is trained on. Differentiable; use inside {@link ModelTrainer.accumulate}. With
 * `packed` (`packBatch`), `lossMask` must be 0 at each sequence's first token, which the
 * previous sequence's last token would otherwise be trained to predict.
 */
export function maskedNllLoss(
  model: CausalLM,
  ids: tf.Tensor2D,
  lossMask: tf.Tensor2D,
  packed?: Pick<PackedBatch, 'positions' | 'attnBias'>,
): tf.Scalar {
  const [B, T] = ids.shape;
  const { logprobs } = tokenStats(model, ids, packed ? { packed } : {});
  const mask = tf.slice(lossMask, [0, 1], [B, T - 1]);
  return tf.div(tf.neg(tf.sum(tf.mul(logprobs, mask))), tf.maximum(tf.sum(mask), 1)) as tf.Scalar;
}
