/**
 * What a training step of this model holds in memory, on paper: float32 weights, gradients and
 * AdamW's two moments for the trained parameters, and the activations a micro-batch keeps for the
 * backward pass, with or without gradient checkpointing. One formula: the trainer's check before
 * allocation (`assertBackendRoom`), the bench's predicted column and the README's table of what
 * fits on a GPU all call {@link trainingMemory}.
 *
 * Activations count what a pass keeps for its gradient: the trainer's backward walk
 * (`freeingGrads`, model/recompute.ts) frees a layer's other intermediates when the layer's
 * forward ends, and each saved tensor and gradient as soon as the walk back has used it. Per token
 * and decoder layer that is 4 hidden-sized tensors (the layer's input and the residual sum, each
 * kept by its RMSNorm, and the two norms' outputs, read by the projections), q and k as projected
 * and (with Qwen3's q/k norms) as normed, v, the attention's output, and 3 of the intermediate
 * size (gate and up, kept by SwiGLU, and its product, read by down_proj); with a LoRA adapter,
 * per adapted linear the rank-sized `(alpha / r)·x·A` (the adapted product is one op,
 * `LoraLayers.linear`), or with dropout the composed form's mask and dropped input (twice the
 * input's size) and two rank-sized products. On top of what is kept, the walk back over one layer
 * holds a few gradients and temporaries (four of the intermediate size and two hidden-sized, at
 * SwiGLU's gradient). With checkpointing a layer keeps only its input, and one layer's kept
 * tensors exist at a time (its recomputed forward, freed by the same walk); the head's gradient
 * runs before the layers', so the step's peak is the larger of the two, not their sum.
 *
 * The attention's scores (query head × query row × key, `rows · heads · T²`): the torch backend
 * computes them in blocks of at most `attentionLimits.maxScores` (model/backend-ops.ts), about
 * four copies of one block while its gradient is taken (scores, probabilities and their two
 * gradients); CUDA's fused SDPA never holds them; the portable attention (cpu, wasm) and webgpu's
 * composed one keep each layer's probabilities for its backward. The LM head holds
 * `vocabCopies` vocabulary-sized float32 rows per token (logits and their gradient: 2 with the
 * fused next-token logprob), for every token, or with a chunked head (`headChunkTokens`) for one
 * chunk's tokens at a time (the recomputed logits and their gradient).
 *
 * Not counted: what the process holds besides tensors (Node, libtorch, the allocator's free
 * pages), which the bench measures (bench/README.md, "train-memory").
 *
 * @module
 */
import { assertBackendRoom, tf } from './backend.ts';
import { attentionLimits } from './backend-ops.ts';
import { parameterShapes, type LlamaConfig } from './config.ts';
import type { LoraConfig } from './lora-adapter.ts';
import { loraModules } from './lora-layers.ts';

/**
 * Tokens per chunk of the training LM head when gradient checkpointing is on
 * (`CausalLM.headChunkTokens`): a chunk's gradient holds two vocabulary rows per token (its
 * recomputed logits and their gradient), for 256 tokens of Qwen3's 151,936-word vocabulary
 * 297 MiB (1,024 tokens held 1.2 GiB, above a recomputed layer's share); the head's products
 * stay large (256 × hidden × vocabulary).
 */
export const defaultHeadChunkTokens = 256;

/** What the formula reads of a LoRA adapter's config (dropout: 0 when absent). */
export type TrainedLora = Pick<LoraConfig, 'r' | 'targetModules'> & { dropout?: number };

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
  /** Tokens per sequence: the micro-batch is `tokens / sequenceLength` rows. @default tokens */
  sequenceLength?: number;
  /**
   * How the attention holds its scores (see the module note): `blocks` (torch: one block of at
   * most `attentionLimits.maxScores` at a time, four copies), `kept` (cpu, wasm, webgpu: each
   * layer's probabilities until its backward), `fused` (CUDA SDPA: none). @default 'blocks'
   */
  attention?: 'blocks' | 'kept' | 'fused';
  /** The LoRA adapter trained (its products are activations of every adapted linear). */
  lora?: TrainedLora;
  /**
   * AdamW's state sharded over `worldSize` data-parallel ranks (`--zero_stage`,
   * model/zero-optimizer.ts): each rank holds 1/N of the moments. Gradients count whole at
   * stage 2 too: the micro-batches' gradients accumulate whole and are reduce-scattered once per
   * step, so the backward pass's peak holds them all. @default unsharded
   */
  zero?: { stage: 1 | 2; worldSize: number };
}

/** Bytes of each part of one training step, and its peak. */
export interface TrainingMemory {
  /** All parameters, float32. */
  weightsBytes: number;
  /** Gradients of the trained parameters, float32. */
  gradientBytes: number;
  /** AdamW's first and second moments of the trained parameters, float32. */
  optimizerBytes: number;
  /** What one micro-batch's forward keeps for its backward pass, LM head included. */
  activationBytes: number;
  /**
   * The step's peak: weights and moments, with the gradients and activations alive at once
   * (their sum when training a subset; for full fine-tuning they peak at different times).
   */
  totalBytes: number;
}

/** Number of parameters of a config (embedding counted once when tied). */
export function parameterCount(config: LlamaConfig): number {
  return parameterShapes(config).reduce((n, [, s]) => n + s.reduce((a, b) => a * b, 1), 0);
}

/** Float32 values one decoder layer keeps for its gradient per token (see the module note). */
export function layerActivationsPerToken(c: LlamaConfig): number {
  const q = c.num_attention_heads * c.head_dim;
  const kv = c.num_key_value_heads * c.head_dim;
  const qk = c.qk_norm ? 2 * q + 2 * kv : q + kv;
  return 4 * c.hidden_size + 3 * c.intermediate_size + qk + kv + q;
}

/** Float32 values a LoRA adapter adds per token and decoder layer (see the module note). */
export function loraActivationsPerToken(c: LlamaConfig, lora: TrainedLora): number {
  const modules = loraModules(c, { ...lora, alpha: lora.r, dropout: 0, baseModel: '' });
  let n = 0;
  for (const [, inp] of modules.values()) n += lora.dropout ? 2 * lora.r + 2 * inp : lora.r;
  return n / c.num_hidden_layers;
}

/** Float32 values per token the walk back over one layer holds beyond what it keeps. */
function layerWalkPerToken(c: LlamaConfig): number {
  return 4 * c.intermediate_size + 2 * c.hidden_size;
}

/** Float32 attention scores alive at the peak of a pass (see the module note). */
export function attentionScoreFloats(
  c: LlamaConfig,
  tokens: number,
  opts: Pick<TrainingMemoryOptions, 'sequenceLength' | 'attention' | 'gradientCheckpointing'>,
): number {
  const T = opts.sequenceLength ?? tokens;
  const scores = (tokens / T) * c.num_attention_heads * T * T;
  const how = opts.attention ?? 'blocks';
  if (how === 'fused') return 0;
  if (how === 'kept') return (opts.gradientCheckpointing ? 2 : c.num_hidden_layers) * scores;
  const block = attentionLimits.maxScores;
  return 4 * (block > 0 ? Math.min(scores, block) : scores);
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
  const perLayer =
    layerActivationsPerToken(config) + (opts.lora ? loraActivationsPerToken(config, opts.lora) : 0);
  const layers = config.num_hidden_layers;
  const scores = attentionScoreFloats(config, N, opts);
  // The final norm's input and output and the gradient of the hidden states, and the vocabulary
  // rows (of one chunk at a time when the head is chunked).
  const edges = N * 3 * config.hidden_size;
  const headTokens = opts.headChunkTokens ? Math.min(N, opts.headChunkTokens) : N;
  const head = headTokens * (opts.vocabCopies ?? 2) * config.vocab_size;
  const walk = N * layerWalkPerToken(config) + scores;
  let floats: number;
  if (opts.gradientCheckpointing) {
    // The layers' inputs throughout; then the head's gradient and each layer's, one at a time.
    const layer = N * perLayer + walk;
    floats = N * layers * config.hidden_size + edges + Math.max(layer, head);
  } else floats = N * layers * perLayer + edges + Math.max(walk, head);
  const m = {
    weightsBytes: 4 * all,
    gradientBytes: 4 * trained,
    optimizerBytes: 8 * (opts.zero ? Math.ceil(trained / opts.zero.worldSize) : trained),
    activationBytes: 4 * floats,
  };
  const transient = transientBytes(config, m, opts, trained === all);
  return { ...m, totalBytes: m.weightsBytes + m.optimizerBytes + transient };
}

/**
 * Gradients and activations at the step's peak. Training a subset (LoRA): both whole. Full
 * fine-tuning: they peak at different times. As the walk starts back every activation and the
 * head's gradient are alive, but of the weights' gradients only the head's; the layers' fill as
 * the walk frees their activations, so at its end every gradient is alive beside the first
 * layer's phase and, with tied embeddings, the embedding's two gradients (the head's and the
 * lookup's) and their sum.
 */
function transientBytes(
  config: LlamaConfig,
  m: Omit<TrainingMemory, 'totalBytes'>,
  opts: TrainingMemoryOptions,
  full: boolean,
): number {
  if (!full) return m.gradientBytes + m.activationBytes;
  const N = opts.tokens;
  const headGradient = 4 * config.vocab_size * config.hidden_size;
  const firstLayer =
    4 *
    (N * (layerActivationsPerToken(config) + config.hidden_size + layerWalkPerToken(config)) +
      attentionScoreFloats(config, N, opts));
  const tied = config.tie_word_embeddings ? 2 * headGradient : 0;
  return Math.max(m.activationBytes + headGradient, m.gradientBytes + firstLayer + tied);
}

/**
 * Throws a one-line `BackendError` (`BACKEND_MEMORY`) when the activations of a training pass over
 * `[rows, tokens]` cannot fit the current backend, before anything is allocated.
 *
 * @param fusedHead the backend's fused next-token logprob runs (else the composed log-softmax,
 *   one-hot and entropy: 8 vocabulary-sized rows per token)
 * @param headChunkTokens tokens per chunk of a chunked LM head (0: unchunked)
 * @param lora the adapter being trained, if any
 */
export function assertTrainingPassRoom(
  config: LlamaConfig,
  [rows, tokens]: [number, number],
  gradientCheckpointing: boolean,
  fusedHead: boolean,
  headChunkTokens = 0,
  lora?: TrainedLora,
): void {
  const { activationBytes } = trainingMemory(config, {
    tokens: rows * tokens,
    sequenceLength: tokens,
    gradientCheckpointing,
    vocabCopies: fusedHead ? 2 : 8,
    headChunkTokens,
    attention: tf.getBackend() === 'torch' ? 'blocks' : 'kept',
    ...(lora ? { lora } : {}),
  });
  const fewer =
    'train on fewer tokens per micro-batch (--train-max-tokens-per-gpu, --micro-train-batch-size)';
  assertBackendRoom(
    activationBytes,
    `a training pass over ${rows} × ${tokens} tokens${gradientCheckpointing ? ' with gradient checkpointing' : ''}`,
    {
      remedy: gradientCheckpointing
        ? `${fewer} or use RTJOB_TF_BACKEND=cpu`
        : `add --gradient-checkpointing, ${fewer}, or use RTJOB_TF_BACKEND=cpu`,
      hostRemedy: gradientCheckpointing ? fewer : `add --gradient-checkpointing or ${fewer}`,
    },
  );
}
