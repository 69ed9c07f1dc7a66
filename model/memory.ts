/**
 * What a training step of this model holds in memory, on paper: float32 weights, gradients and
 * AdamW's two moments for the trained parameters, and the activations a micro-batch keeps for the
 * backward pass, with or without gradient checkpointing. One formula: the trainer's check before
 * allocation (`assertBackendRoom`), the bench's predicted column and the README's table of what
 * fits on a GPU all call {@link trainingMemory}.
 *
 * Activations count the distinct buffers this implementation's forward pass creates (TF.js frees
 * a pass's intermediates only when the pass ends, so every one of them counts, not only those
 * kept for the gradient): per token and decoder layer, 10 hidden-sized tensors (two RMSNorms of
 * three each, the o_proj and down_proj outputs and the two residual sums), 5 of the intermediate
 * size (gate, up, SiLU's sigmoid and two products), q (and with Qwen3's q/k norms three more of
 * it, plus the attention output) and k, v. With checkpointing a layer keeps only its input
 * (hidden-sized) and one layer's activations exist at a time, twice over while its gradient is
 * taken (the recomputed pass and its gradients). The LM head holds `vocabCopies` vocabulary-sized
 * float32 rows per token (logits and their gradient: 2 with the fused next-token logprob), for
 * every token, or with a chunked head (`headChunkTokens`) for one chunk's tokens at a time.
 *
 * @module
 */
import { assertBackendRoom } from './backend.ts';
import { parameterShapes, type LlamaConfig } from './config.ts';

/**
 * Tokens per chunk of the training LM head when gradient checkpointing is on
 * (`CausalLM.headChunkTokens`): 1024 × Qwen3's 151,936-word vocabulary is 0.6 GiB of float32
 * logits per chunk, and a chunk's two products keep the head's matrix products large.
 */
export const defaultHeadChunkTokens = 1024;

/** Options of {@link trainingMemory}. */
export interface TrainingMemoryOptions {
  /** Tokens in one micro-batch (rows × padded length). */
  tokens: number;
  /** Activations of one layer at a time instead of all (see `CausalLM.gradientCheckpointing`). @default false */
  gradientCheckpointing?: boolean;
  /**
   * Parameters that get gradients and AdamW moments: every one for full fine-tuning (the
   * default), the adapters' for LoRA (the base weights are then only read).
   */
  trainableParameters?: number;
  /**
   * Vocabulary-sized float32 rows per token in the LM head: 2 (logits and their gradient) with
   * the fused next-token logprob, more where the loss composes log-softmax, one-hot and entropy.
   * @default 2
   */
  vocabCopies?: number;
  /**
   * Tokens per chunk of a chunked LM head (`CausalLM.chunkedHead`): its vocabulary rows exist
   * for one chunk at a time. 0 or absent: for all tokens at once.
   */
  headChunkTokens?: number;
}

/** Bytes of each part of one training step, and their sum. */
export interface TrainingMemory {
  /** All parameters, float32. */
  weightsBytes: number;
  /** Gradients of the trained parameters, float32. */
  gradientBytes: number;
  /** AdamW's first and second moments of the trained parameters, float32. */
  optimizerBytes: number;
  /** What one micro-batch's forward keeps for its backward pass, LM head included. */
  activationBytes: number;
  totalBytes: number;
}

/** Number of parameters of a config (embedding counted once when tied). */
export function parameterCount(config: LlamaConfig): number {
  return parameterShapes(config).reduce((n, [, s]) => n + s.reduce((a, b) => a * b, 1), 0);
}

/** Float32 values one decoder layer's forward pass creates per token (see the module note). */
export function layerActivationsPerToken(c: LlamaConfig): number {
  const q = c.num_attention_heads * c.head_dim;
  const kv = c.num_key_value_heads * c.head_dim;
  const qk = c.qk_norm ? 4 * q + 4 * kv : q + kv;
  return 10 * c.hidden_size + 5 * c.intermediate_size + qk + q + kv;
}

/**
 * The memory of one training step of `config` on a micro-batch of `opts.tokens` tokens.
 *
 * @example
 * const m = trainingMemory(qwen3_06b, { tokens: 2048, gradientCheckpointing: true });
 * m.totalBytes / 2 ** 30; // GiB
 */
export function trainingMemory(config: LlamaConfig, opts: TrainingMemoryOptions): TrainingMemory {
  const all = parameterCount(config);
  const trained = opts.trainableParameters ?? all;
  const N = opts.tokens;
  const perLayer = layerActivationsPerToken(config);
  const layers = config.num_hidden_layers;
  const layerFloats = opts.gradientCheckpointing
    ? N * (layers * config.hidden_size + 2 * perLayer)
    : N * layers * perLayer;
  // The embedding output, the final norm (three hidden-sized tensors) and the vocabulary rows
  // (of one chunk at a time when the head is chunked).
  const headTokens = opts.headChunkTokens ? Math.min(N, opts.headChunkTokens) : N;
  const headFloats =
    N * 4 * config.hidden_size + headTokens * (opts.vocabCopies ?? 2) * config.vocab_size;
  const m = {
    weightsBytes: 4 * all,
    gradientBytes: 4 * trained,
    optimizerBytes: 8 * trained,
    activationBytes: 4 * (layerFloats + headFloats),
  };
  return {
    ...m,
    totalBytes: m.weightsBytes + m.gradientBytes + m.optimizerBytes + m.activationBytes,
  };
}

/**
 * Throws a one-line `BackendError` (`BACKEND_MEMORY`) when the activations of a training pass over
 * `[rows, tokens]` cannot fit the current backend, before anything is allocated.
 *
 * @param fusedHead the backend's fused next-token logprob runs (else the composed log-softmax,
 *   one-hot and entropy: 8 vocabulary-sized rows per token)
 * @param headChunkTokens tokens per chunk of a chunked LM head (0: unchunked)
 */
export function assertTrainingPassRoom(
  config: LlamaConfig,
  [rows, tokens]: [number, number],
  gradientCheckpointing: boolean,
  fusedHead: boolean,
  headChunkTokens = 0,
): void {
  const { activationBytes } = trainingMemory(config, {
    tokens: rows * tokens,
    gradientCheckpointing,
    vocabCopies: fusedHead ? 2 : 8,
    headChunkTokens,
  });
  assertBackendRoom(
    activationBytes,
    `a training pass over ${rows} × ${tokens} tokens${gradientCheckpointing ? ' with gradient checkpointing' : ''}`,
    0,
    gradientCheckpointing
      ? 'train on fewer tokens per micro-batch (--train-max-tokens-per-gpu, --micro-train-batch-size) or use RTJOB_TF_BACKEND=cpu'
      : 'add --gradient-checkpointing, train on fewer tokens per micro-batch, or use RTJOB_TF_BACKEND=cpu',
  );
}
