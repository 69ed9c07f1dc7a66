/**
 * A decoder-only transformer with the equations of HF transformers' Llama, Mistral, Qwen2 and
 * Qwen3 models: RMSNorm, rotary embeddings in the `rotate_half` convention (default, linear or
 * Llama 3 frequencies), grouped-query attention, SwiGLU MLP, optional tied embeddings, q/k/v and
 * o_proj biases, Qwen3's per-head q/k RMSNorm, and an optional scalar value head for the critic.
 * Weights are TF.js variables keyed by their HF names; linear weights are kept as `[in, out]`
 * (see {@link isStoredTransposed}) and read and written in HF layout (`[out, in]`).
 *
 * Longer than ~500 lines on purpose: the forward pass, the weight layout and the loaders' one
 * checking rule are one concept (STYLE.md lets the model grow large).
 *
 * @module
 */
import { assertBackendRoom, backendOnHost, readToHost, tf } from './backend.ts';
import { isIgnorableTensor, parameterShapes, ropeInvFreq, type LlamaConfig } from './config.ts';
import {
  fusedAttention,
  fusedAttentionWithCache,
  fusedAttentionWithPast,
  hasFusedAttentionWithPast,
} from './attention.ts';
import { matMul, matMulNoGrad } from './matmul.ts';
import { defaultHeadChunkTokens } from './memory.ts';
import { recomputeGrads } from './recompute.ts';
import { rmsNormOp, rmsNormValue, swigluOp, swigluValue } from './layer-ops.ts';
import type { NamedTensors } from './tensors.ts';
import { ModelError } from './errors.ts';
import type { LoraAdapter, LoraConfig } from './lora-adapter.ts';
import { LoraLayers } from './lora-layers.ts';

/** Per-layer attention keys and values, `[B, numKeyValueHeads, T, headDim]`, RoPE applied. */
export interface LayerKV {
  k: tf.Tensor4D;
  v: tf.Tensor4D;
}

/** Options of {@link CausalLM.forward}. */
export interface ForwardOptions {
  /** Position ids `[B, T]` (int32); defaults to `past length + arange(T)` for every row. */
  positions?: tf.Tensor2D;
  /**
   * Additive attention bias `[B or 1, T, Tpast + T]` (0 = attend, -1e9 = masked). Defaults to the
   * causal mask offset by the past length.
   */
  attnBias?: tf.Tensor3D;
  /** Cached keys and values of earlier positions, one entry per layer. */
  past?: LayerKV[];
  /**
   * Also return the keys and values of all positions (past + new). Inference only: a pass
   * without `past` that fills a cache records no gradient for attention. @default false
   */
  returnPresent?: boolean;
  /**
   * Build the pass for differentiation. `false` (inference: decoding, reference logprobs) skips
   * the custom-gradient bookkeeping. @default true
   */
  grad?: boolean;
  /** Compute logits. @default true */
  logits?: boolean;
}

/** What {@link CausalLM.forward} returns; every tensor belongs to the caller. */
export interface ForwardOutput {
  /** `[B, T, vocab]` (absent when `logits: false`). */
  logits?: tf.Tensor3D;
  /** Final normed hidden states `[B, T, hidden]`. */
  hidden: tf.Tensor3D;
  /** Keys/values for every layer (when `returnPresent`). */
  present?: LayerKV[];
}

/** What every decoder layer of one forward pass shares. */
interface LayerInputs {
  B: number;
  T: number;
  /** Keys per row: past + new. */
  Tk: number;
  /** Attention as one fused op (host backends without a cache read; torch with one too). */
  fused: boolean;
  /** Rotary tables at each token's position, and the additive attention bias. */
  cos: tf.Tensor;
  sin: tf.Tensor;
  bias: tf.Tensor;
  past?: LayerKV[];
  /** Collects each layer's keys and values when asked for. */
  present?: LayerKV[];
}

/** The name of the critic's scalar head (`[1, hidden]`). */
export const valueHeadName = 'value_head.weight';
const maskValue = -1e9;
/** TF.js variable names are process-global; a per-model suffix lets several models share a process. */
let modelSerial = 0;
const variableName = (name: string, serial: number): string => `${name}#${serial}`;

/**
 * Linear weights are stored transposed (`[in, out]`) so that forward products need no transpose
 * (the wasm backend's transposed path is slow); names, shapes on disk and `exportWeights` stay HF.
 */
export function isStoredTransposed(name: string): boolean {
  return name.endsWith('_proj.weight') || name === 'lm_head.weight' || name === valueHeadName;
}

function toStored(name: string, t: tf.Tensor): tf.Tensor {
  return isStoredTransposed(name) ? tf.transpose(t) : t;
}

/**
 * A row-major `[rows, cols]` array as `[cols, rows]`, in cache-sized blocks. Loading and exporting
 * transpose in JS rather than with `tf.transpose`, which the cpu backend runs at ~5M elements/s
 * (100 s for a 0.6B model's linear weights) and which would hold a second backend copy.
 */
function transposeArray(a: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(a.length);
  const block = 64;
  for (let i0 = 0; i0 < rows; i0 += block) {
    const i1 = Math.min(i0 + block, rows);
    for (let j0 = 0; j0 < cols; j0 += block) {
      const j1 = Math.min(j0 + block, cols);
      for (let i = i0; i < i1; i++) {
        const src = i * cols;
        for (let j = j0; j < j1; j++) out[j * rows + i] = a[src + j]!;
      }
    }
  }
  return out;
}

/** An HF-layout tensor as a backend tensor in the stored layout (see {@link isStoredTransposed}). */
function storedTensor(name: string, t: { shape: number[]; data: Float32Array }): tf.Tensor {
  if (!isStoredTransposed(name)) return tf.tensor(t.data, t.shape, 'float32');
  const [rows = 0, cols = 0] = t.shape;
  return tf.tensor(transposeArray(t.data, rows, cols), [cols, rows], 'float32');
}

/** Embedding lookup whose gradient is a ScatterNd: the wasm backend lacks UnsortedSegmentSum. */
const embedLookup = tf.customGrad(((table: tf.Tensor, ids: tf.Tensor, save: tf.GradSaveFunc) => {
  save([ids]);
  const flat = tf.reshape(ids, [-1]);
  const out = tf.reshape(tf.gather(table, flat), [...ids.shape, table.shape[1]!]);
  return {
    value: out,
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const idx = saved[0]!;
      const d = table.shape[1]!;
      const dTable = tf.scatterND(tf.reshape(idx, [-1, 1]), tf.reshape(dy, [-1, d]), table.shape);
      return [dTable, tf.zerosLike(idx)];
    },
  };
}) as unknown as Parameters<typeof tf.customGrad>[0]) as unknown as (
  table: tf.Tensor2D,
  ids: tf.Tensor2D,
) => tf.Tensor3D;

/** Where tensors came from, for errors: one file, or the file of each tensor (shards). */
export type TensorSource = string | ((name: string) => string);

/**
 * The one rule both loaders ({@link CausalLM.fromTensors}, {@link CausalLM.importWeights})
 * apply: each given tensor must be one the model computes with, at its shape, or one transformers
 * also ignores (a tied `lm_head.weight`, `rotary_emb.inv_freq`); unless `partial`, each expected
 * tensor must be given. `expected` maps HF names to HF shapes.
 *
 * @throws Error naming the tensor and its file
 */
export function checkTensors(
  config: LlamaConfig,
  expected: Map<string, number[]>,
  tensors: NamedTensors,
  opts: { source?: TensorSource; partial: boolean },
): void {
  const where = (name: string): string =>
    typeof opts.source === 'function' ? opts.source(name) : (opts.source ?? 'checkpoint');
  for (const [name, t] of Object.entries(tensors)) {
    const shape = expected.get(name);
    if (!shape) {
      if (isIgnorableTensor(config, name)) continue;
      throw new ModelError(
        'MODEL_CHECKPOINT',
        `${where(name)}: tensor '${name}' is not used by this ${config.model_type} model (config: ` +
          `qkv_bias ${config.qkv_bias}, o_bias ${config.o_bias}, qk_norm ${config.qk_norm}, ` +
          `tie_word_embeddings ${config.tie_word_embeddings}, ${config.num_hidden_layers} layers); refusing to drop it`,
      );
    }
    if (t.shape.join(',') !== shape.join(',')) {
      throw new ModelError(
        'MODEL_CHECKPOINT',
        `${where(name)}: tensor '${name}' has shape [${t.shape}], config implies [${shape}]`,
      );
    }
  }
  if (opts.partial) return;
  for (const name of expected.keys()) {
    if (!tensors[name] && name !== valueHeadName)
      throw new ModelError('MODEL_CHECKPOINT', `${where(name)}: missing tensor '${name}'`);
  }
}

/** The clear error for a sequence longer than the model's positions (forward, prefill, decode). */
export function checkSequenceLength(config: LlamaConfig, tokens: number): void {
  if (tokens > config.max_position_embeddings) {
    throw new ModelError(
      'MODEL_CHECKPOINT',
      `sequence of ${tokens} tokens exceeds max_position_embeddings ${config.max_position_embeddings}`,
    );
  }
}

/**
 * The causal LM. Create with {@link CausalLM.init} (random) or `loadModel` (from disk).
 *
 * @example
 * const model = CausalLM.init(config, { seed: 1 });
 * const { logits } = tf.tidy(() => model.forward(tf.tensor2d([[1, 2, 3]], [1, 3], 'int32')));
 */
export class CausalLM {
  readonly config: LlamaConfig;
  /** Trainable weights by HF name. */
  readonly params: Map<string, tf.Variable>;
  /** The LoRA adapter over the frozen base, when one is attached ({@link attachLora}). */
  lora: LoraLayers | undefined;
  /** The adapter takes part in the forward pass (see {@link withoutLora}). */
  private loraOn = true;
  private readonly cos: tf.Tensor2D;
  private readonly sin: tf.Tensor2D;
  private readonly rot: tf.Tensor2D;
  private disposed = false;
  /**
   * Recompute each decoder layer's activations in the backward pass instead of keeping them
   * (HF's `gradient_checkpointing_enable()`): training keeps the layers' inputs and one layer's
   * activations at a time, for about one more forward pass of compute. Applies to passes built
   * for differentiation (`grad` not false) that neither read nor fill a KV cache. @default false
   */
  gradientCheckpointing = false;

  /**
   * Tokens per chunk of the training LM head ({@link chunkedHead}): with gradient checkpointing
   * on, `tokenStats` computes the next-token logprobs over chunks of this many tokens, so at
   * most one chunk's vocabulary-wide logits (and their gradient) exist at once. 0 turns the
   * chunking off. @default 1024
   */
  headChunkTokens = defaultHeadChunkTokens;

  private constructor(config: LlamaConfig, params: Map<string, tf.Variable>) {
    this.config = config;
    this.params = params;
    const hd = config.head_dim;
    const half = hd / 2;
    const maxPos = config.max_position_embeddings;
    const cos = new Float32Array(maxPos * hd);
    const sin = new Float32Array(maxPos * hd);
    const invFreq = ropeInvFreq(config);
    for (let p = 0; p < maxPos; p++) {
      for (let i = 0; i < half; i++) {
        // HF computes inv_freq in float32 then the outer product; do the same rounding.
        const a = Math.fround(p * invFreq[i]!);
        cos[p * hd + i] = cos[p * hd + i + half] = Math.cos(a);
        sin[p * hd + i] = sin[p * hd + i + half] = Math.sin(a);
      }
    }
    this.cos = tf.keep(tf.tensor2d(cos, [maxPos, hd]));
    this.sin = tf.keep(tf.tensor2d(sin, [maxPos, hd]));
    // rotate_half(x) = cat(-x[half:], x[:half]) written as x @ rot.
    const r = new Float32Array(hd * hd);
    for (let j = 0; j < half; j++) {
      r[(j + half) * hd + j] = -1;
      r[j * hd + j + half] = 1;
    }
    this.rot = tf.keep(tf.tensor2d(r, [hd, hd]));
  }

  /**
   * A randomly initialised model (normal(0, 0.02) weights, unit norms), seeded.
   *
   * @param opts.valueHead add the critic's scalar head
   */
  static init(config: LlamaConfig, opts: { seed?: number; valueHead?: boolean } = {}): CausalLM {
    const seed = opts.seed ?? 0;
    const params = new Map<string, tf.Variable>();
    const shapes = parameterShapes(config);
    if (opts.valueHead) shapes.push([valueHeadName, [1, config.hidden_size]]);
    const serial = ++modelSerial;
    shapes.forEach(([name, shape], i) => {
      const init = tf.tidy(() =>
        name.endsWith('norm.weight')
          ? tf.ones(shape)
          : name.endsWith('.bias')
            ? tf.zeros(shape)
            : toStored(name, tf.randomNormal(shape, 0, 0.02, 'float32', seed * 1000 + i)),
      );
      params.set(name, tf.variable(init, true, variableName(name, serial)));
      init.dispose();
    });
    return new CausalLM(config, params);
  }

  /**
   * A model from named tensors (HF names), under the rule of {@link checkTensors}: every tensor
   * the config implies must be there with its shape, and nothing else may be. A value head is
   * kept when present (or added, zero, with `valueHead`).
   *
   * @param opts.source names the file each tensor came from, for errors
   * @param opts.consume delete each entry from `tensors` once it is on the backend, so its array
   *   can be collected while the next one uploads: a loader then never holds the weights twice
   *   (for a 0.6B model, 2.4 GB of float32 arrays beside the backend's own copy)
   */
  static fromTensors(
    config: LlamaConfig,
    tensors: NamedTensors,
    opts: { valueHead?: boolean; source?: TensorSource; consume?: boolean } = {},
  ): CausalLM {
    const shapes = parameterShapes(config);
    if (opts.valueHead || tensors[valueHeadName])
      shapes.push([valueHeadName, [1, config.hidden_size]]);
    checkTensors(config, new Map(shapes), tensors, { source: opts.source, partial: false });
    const sizes = shapes.map(([, shape]) => shape.reduce((a, b) => a * b, 1));
    const count = sizes.reduce((n, s) => n + s, 0);
    const largestBytes = 4 * Math.max(0, ...sizes);
    assertBackendRoom(4 * count, `a model of ${(count / 1e6).toFixed(0)}M parameters`, {
      largestBytes,
      ...(opts.consume ? { hostBytes: largestBytes } : {}),
    });
    const params = new Map<string, tf.Variable>();
    const serial = ++modelSerial;
    for (const [name, shape] of shapes) {
      const t = tensors[name];
      // A fresh value head is zero; kept in the stored ([in, out]) layout like every linear weight.
      const v = tf.tidy(() => (t ? storedTensor(name, t) : toStored(name, tf.zeros(shape))));
      params.set(name, tf.variable(v, true, variableName(name, serial)));
      v.dispose();
      if (opts.consume) delete tensors[name];
    }
    return new CausalLM(config, params);
  }

  /**
   * Attaches a new LoRA adapter (PEFT's initialisation, seeded: the model still computes the
   * base exactly) or, given an adapter, one with its matrices. From then on only the adapter (and
   * a value head) is trainable ({@link trainableParams}); the base weights stay as they are.
   *
   * @throws ModelError `MODEL_INPUT` when an adapter is attached already or the config is invalid;
   *   `MODEL_CHECKPOINT` for an adapter that does not fit this model
   */
  attachLora(config: LoraConfig, opts: { seed?: number; adapter?: LoraAdapter } = {}): LoraLayers {
    if (this.lora) throw new ModelError('MODEL_INPUT', 'model already has a LoRA adapter');
    const layers = new LoraLayers(this.config, config, opts);
    try {
      if (opts.adapter) layers.importAdapter(opts.adapter);
    } catch (e) {
      layers.dispose();
      throw e;
    }
    this.lora = layers;
    return layers;
  }

  /**
   * Makes the model compute base + `adapter`: its matrices are loaded into the attached adapter
   * when rank and targets agree, otherwise the attached one is replaced (so an engine applies a
   * new version of the trainer's adapter without allocating anything).
   */
  loadLora(adapter: LoraAdapter): void {
    const cur = this.lora;
    const same =
      cur &&
      cur.config.r === adapter.config.r &&
      cur.config.targetModules.length === adapter.config.targetModules.length &&
      cur.config.targetModules.every((m) => adapter.config.targetModules.includes(m));
    if (same) return cur.importAdapter(adapter);
    this.detachLora();
    this.attachLora(adapter.config, { adapter });
  }

  /** Removes the adapter: the model computes the base again. */
  detachLora(): void {
    this.lora?.dispose();
    this.lora = undefined;
  }

  /** Whether an adapter takes part in the forward pass now (false inside {@link withoutLora}). */
  get loraActive(): boolean {
    return this.lora !== undefined && this.loraOn;
  }

  /** Runs `fn` with the adapter left out of the forward pass: the base model's outputs. */
  withoutLora<T>(fn: () => T): T {
    const was = this.loraOn;
    this.loraOn = false;
    try {
      return fn();
    } finally {
      this.loraOn = was;
    }
  }

  /**
   * The variables an optimizer trains: every weight, or with an adapter attached only the
   * adapter's matrices and a value head (the critic's, trained in full) — the base stays frozen.
   */
  trainableParams(): Map<string, tf.Variable> {
    if (!this.lora) return this.params;
    const out = new Map(this.lora.vars);
    const head = this.params.get(valueHeadName);
    if (head) out.set(valueHeadName, head);
    return out;
  }

  /** Number of base weights (an attached adapter's are `lora.numParameters`). */
  get numParameters(): number {
    let n = 0;
    this.params.forEach((p) => (n += p.size));
    return n;
  }

  get hasValueHead(): boolean {
    return this.params.has(valueHeadName);
  }

  private p(name: string): tf.Variable {
    const v = this.params.get(name);
    if (!v) throw new ModelError('MODEL_INPUT', `model has no parameter '${name}'`);
    return v;
  }

  /** The product used by the current forward pass (custom gradient only when training). */
  private mm: (a: tf.Tensor, b: tf.Tensor, tA?: boolean, tB?: boolean) => tf.Tensor = matMul;

  /**
   * The number of the current forward pass when it is built for differentiation (the adapter's
   * dropout applies, seeded by it, so a recomputed layer draws the masks its forward drew; the
   * layer's composite ops run as single ops), or 0 for an inference pass. Counted per model.
   */
  private trainingPass = 0;
  private trainingPasses = 0;

  /** Whether the current pass is built for differentiation. */
  private get training(): boolean {
    return this.trainingPass > 0;
  }

  /** Runs `fn` as part of training pass `pass` (a checkpointed layer's recomputation). */
  private inTrainingPass<T>(pass: number, fn: () => T): T {
    const [was, mm] = [this.trainingPass, this.mm];
    this.trainingPass = pass;
    this.mm = matMul;
    try {
      return fn();
    } finally {
      this.trainingPass = was;
      this.mm = mm;
    }
  }

  private linear(x: tf.Tensor, name: string, bias?: string): tf.Tensor {
    const w = this.p(name);
    const shape = x.shape;
    const flat = tf.reshape(x, [-1, shape[shape.length - 1]!]);
    const adapted = this.loraOn
      ? this.lora?.linear(flat, w, name, this.mm, this.trainingPass)
      : undefined;
    let y: tf.Tensor = adapted ?? this.mm(flat, w);
    if (bias && this.params.has(bias)) y = tf.add(y, this.p(bias));
    return tf.reshape(y, [...shape.slice(0, -1), w.shape[1]!]);
  }

  /** RMSNorm; in a training pass one op that keeps only its input (model/layer-ops.ts). */
  private rmsNorm(x: tf.Tensor, name: string): tf.Tensor {
    const norm = this.training ? rmsNormOp : rmsNormValue;
    return norm(x, this.p(name), this.config.rms_norm_eps);
  }

  /**
   * Qwen3's per-head RMSNorm of queries or keys (`q_norm` / `k_norm`, over `head_dim`), applied
   * to the projections `[N, heads * head_dim]` before RoPE; values and other families pass through.
   */
  private headNorm(x: tf.Tensor, attn: string, proj: string): tf.Tensor {
    if (!this.config.qk_norm || proj === 'v') return x;
    const shape = x.shape;
    const normed = this.rmsNorm(
      tf.reshape(x, [-1, this.config.head_dim]),
      `${attn}${proj}_norm.weight`,
    );
    return tf.reshape(normed, shape);
  }

  private rope(x: tf.Tensor4D, cos: tf.Tensor, sin: tf.Tensor): tf.Tensor4D {
    const hd = this.config.head_dim;
    const rotated = tf.reshape(this.mm(tf.reshape(x, [-1, hd]), this.rot), x.shape);
    return tf.add(tf.mul(x, cos), tf.mul(rotated, sin)) as tf.Tensor4D;
  }

  /**
   * Runs the transformer. Call inside `tf.tidy` (or dispose the outputs yourself).
   *
   * @param ids token ids `[B, T]` (int32)
   */
  forward(ids: tf.Tensor2D, opts: ForwardOptions = {}): ForwardOutput {
    this.mm = opts.grad === false ? matMulNoGrad : matMul;
    this.trainingPass = opts.grad === false ? 0 : ++this.trainingPasses;
    try {
      return this.forwardImpl(ids, opts);
    } finally {
      this.mm = matMul;
      this.trainingPass = 0;
    }
  }

  private forwardImpl(ids: tf.Tensor2D, opts: ForwardOptions): ForwardOutput {
    if (this.disposed) throw new ModelError('MODEL_DISPOSED', 'model is disposed');
    const c = this.config;
    const [B, T] = ids.shape;
    const hd = c.head_dim;
    const past = opts.past;
    const Tp = past?.[0]?.k.shape[2] ?? 0;
    const Tk = Tp + T;
    if (!opts.positions) checkSequenceLength(c, Tk);
    const positions =
      opts.positions ??
      (tf.tile(tf.reshape(tf.range(Tp, Tk, 1, 'int32'), [1, T]), [B, 1]) as tf.Tensor2D);
    // Without a cache to read (training, scoring, prefill), attention runs as one fused op in JS
    // loops where tensors live in host memory; on a GPU it is composed from the backend's kernels.
    // Reading a cache, too, where the backend has that fused (torch: decoding in one op a layer).
    const fused = past ? hasFusedAttentionWithPast() : backendOnHost();
    const flatPos = tf.reshape(positions, [-1]);
    const cosShape = fused ? [B, T, hd] : [B, 1, T, hd];
    const cos = tf.reshape(tf.gather(this.cos, flatPos), cosShape);
    const sin = tf.reshape(tf.gather(this.sin, flatPos), cosShape);
    let bias: tf.Tensor;
    if (opts.attnBias) bias = opts.attnBias;
    else {
      const m = new Float32Array(T * Tk);
      for (let i = 0; i < T; i++) for (let j = Tp + i + 1; j < Tk; j++) m[i * Tk + j] = maskValue;
      bias = tf.tensor(m, [1, T, Tk]);
    }
    if (!fused) bias = tf.reshape(bias, [bias.shape[0]!, 1, 1, T, Tk]);
    const present: LayerKV[] = [];
    const ctx: LayerInputs = { B, T, Tk, fused, cos, sin, bias };
    if (past) ctx.past = past;
    if (opts.returnPresent) ctx.present = present;
    // Checkpointing pays only where a backward pass will follow and no cache is read or filled.
    const checkpoint =
      this.gradientCheckpointing && opts.grad !== false && !past && !opts.returnPresent;
    let h: tf.Tensor = embedLookup(this.p('model.embed_tokens.weight') as tf.Tensor2D, ids);
    for (let l = 0; l < c.num_hidden_layers; l++) {
      // A layer's intermediates go when it ends, but those its ops saved for the gradient (a
      // cache it fills outlives it: no scope then).
      const layerIn = h;
      if (checkpoint) h = this.checkpointedLayer(l, layerIn, ctx);
      else if (ctx.present) h = this.decoderLayer(l, layerIn, ctx);
      else h = tf.tidy(() => this.decoderLayer(l, layerIn, ctx));
    }
    const hidden = this.rmsNorm(h, 'model.norm.weight') as tf.Tensor3D;
    const out: ForwardOutput = { hidden };
    if (opts.logits !== false) {
      out.logits = this.logitsFromHidden(hidden) as tf.Tensor3D;
    }
    if (opts.returnPresent) out.present = present;
    return out;
  }

  /**
   * One decoder layer: `h + attn(norm(h))`, then `+ mlp(norm(·))`. Reads its weights through
   * {@link p} (and {@link linear}); with checkpointing, every trainable variable it reads must be
   * among {@link layerVariables}, or its gradient is lost.
   */
  private decoderLayer(l: number, h: tf.Tensor, ctx: LayerInputs): tf.Tensor {
    const c = this.config;
    const { B, T, Tk, cos, sin, bias } = ctx;
    const H = c.num_attention_heads;
    const KV = c.num_key_value_heads;
    const hd = c.head_dim;
    const nRep = H / KV;
    const scale = 1 / Math.sqrt(hd);
    const pre = `model.layers.${l}.`;
    const a = `${pre}self_attn.`;
    const x = tf.reshape(this.rmsNorm(h, `${pre}input_layernorm.weight`), [-1, c.hidden_size]);
    let attn: tf.Tensor;
    if (ctx.fused) {
      const proj = (name: string, width: number): tf.Tensor3D =>
        tf.reshape(
          this.headNorm(
            this.linear(x, `${a}${name}_proj.weight`, `${a}${name}_proj.bias`),
            a,
            name,
          ),
          [B, T, width],
        ) as tf.Tensor3D;
      const [q, k, v] = [proj('q', H * hd), proj('k', KV * hd), proj('v', KV * hd)];
      const [cos3, sin3, bias3] = [cos as tf.Tensor3D, sin as tf.Tensor3D, bias as tf.Tensor3D];
      const layerPast = ctx.past?.[l];
      if (layerPast) {
        const r = fusedAttentionWithPast(q, k, v, cos3, sin3, bias3, layerPast.k, layerPast.v, {
          H,
          KV,
          hd,
        });
        ctx.present?.push({ k: r.k, v: r.v });
        attn = r.out;
      } else if (ctx.present) {
        // Filling a cache is inference only: this variant records no gradient.
        const r = fusedAttentionWithCache(q, k, v, cos3, sin3, bias3, { H, KV, hd });
        ctx.present.push({ k: r.k, v: r.v });
        attn = r.out;
      } else attn = fusedAttention(q, k, v, cos3, sin3, bias3, { H, KV, hd });
    } else {
      // Separate q, k, v products: splitting one fused product costs more on wasm. For one new
      // token per row (decoding) the head transpose is a reshape.
      const heads = (name: string, n: number): tf.Tensor4D => {
        const t = tf.reshape(
          this.headNorm(
            this.linear(x, `${a}${name}_proj.weight`, `${a}${name}_proj.bias`),
            a,
            name,
          ),
          [B, T, n, hd],
        );
        return (
          T === 1 ? tf.reshape(t, [B, n, 1, hd]) : tf.transpose(t, [0, 2, 1, 3])
        ) as tf.Tensor4D;
      };
      const q = this.rope(heads('q', H), cos, sin);
      const kNew = this.rope(heads('k', KV), cos, sin);
      const vNew = heads('v', KV);
      let k = kNew;
      let v = vNew;
      const layerPast = ctx.past?.[l];
      if (layerPast) {
        k = tf.concat([layerPast.k, k], 2);
        v = tf.concat([layerPast.v, v], 2);
      }
      ctx.present?.push({ k, v });
      // Grouped-query attention without materialising repeated heads: query head h uses kv head
      // floor(h / nRep), as HF's repeat_kv does.
      // Scaling q (T rows) is cheaper than scaling the scores (T x Tk).
      const qg = tf.mul(tf.reshape(q, [B, KV, nRep * T, hd]), scale);
      const scores = tf.reshape(this.mm(qg, k, false, true), [B, KV, nRep, T, Tk]);
      const probs = tf.reshape(tf.softmax(tf.reshape(tf.add(scores, bias), [-1, Tk])), [
        B,
        KV,
        nRep * T,
        Tk,
      ]);
      const mixed = tf.reshape(this.mm(probs, v), [B, H, T, hd]);
      attn = tf.reshape(T === 1 ? mixed : tf.transpose(mixed, [0, 2, 1, 3]), [B, T, H * hd]);
    }
    const r = tf.add(h, this.linear(attn, `${a}o_proj.weight`, `${a}o_proj.bias`));
    const y = tf.reshape(this.rmsNorm(r, `${pre}post_attention_layernorm.weight`), [
      -1,
      c.hidden_size,
    ]);
    // Gate and up as two products: splitting one fused product's output costs more on wasm.
    const gate = this.linear(y, `${pre}mlp.gate_proj.weight`);
    const up = this.linear(y, `${pre}mlp.up_proj.weight`);
    const swiglu = this.training ? swigluOp : swigluValue;
    const act = tf.reshape(swiglu(gate, up), [B, T, c.intermediate_size]);
    return tf.add(r, this.linear(act, `${pre}mlp.down_proj.weight`));
  }

  /**
   * The trainable variables decoder layer `l` reads: its weights by HF name prefix, or with a
   * LoRA adapter its adapter's matrices (PEFT names hold the same prefix). Under checkpointing
   * they are the layer op's inputs, so their gradients flow out of the recomputed pass; frozen
   * ones (`trainable: false`, or a base under an adapter) are read as constants.
   */
  layerVariables(l: number): tf.Variable[] {
    const prefix = `model.layers.${l}.`;
    return [...this.trainableParams()]
      .filter(([n, v]) => (n.startsWith(prefix) || n.includes(`.${prefix}`)) && v.trainable)
      .map(([, v]) => v);
  }

  /**
   * {@link decoderLayer} as one differentiable op that keeps only its input: the forward runs
   * with no gradient tape (its activations are freed at once), and the gradient re-runs the layer
   * from the saved input under a tape of its own, whose saved tensors and gradients are freed as
   * the walk back over it uses them (`recomputeGrads`); the saved input goes with the layer's
   * gradient. Gradients equal the plain pass's: the same kernels on the same inputs.
   */
  private checkpointedLayer(l: number, h: tf.Tensor, ctx: LayerInputs): tf.Tensor {
    const vars = this.layerVariables(l);
    const pass = this.trainingPass;
    const fn = tf.customGrad(((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const save = args[args.length - 1] as tf.GradSaveFunc;
      const x = args[0] as tf.Tensor;
      // Saved tensors share their data with the originals (a clone is a new reference).
      save([x, ctx.cos, ctx.sin, ctx.bias]);
      return {
        value: this.decoderLayer(l, x, ctx),
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
          const [x0, cos, sin, bias] = saved as [tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor];
          const again: LayerInputs = { ...ctx, cos, sin, bias };
          const grads = this.inTrainingPass(pass, () =>
            recomputeGrads(() => this.decoderLayer(l, x0, again), [x0, ...vars], dy),
          );
          // The layer's input (this op's copy of it) and its output's gradient are read by no
          // other layer: freed now, not when the whole backward pass ends.
          tf.dispose([x0, dy]);
          return grads;
        },
      };
    }) as unknown as Parameters<typeof tf.customGrad>[0]) as unknown as (
      ...xs: tf.Tensor[]
    ) => tf.Tensor;
    return fn(h, ...vars);
  }

  /**
   * The trainable variables {@link logitsFromHidden} reads: the head's weight (the embedding when
   * tied) when it is trained, and an adapter's matrices on `lm_head` if one targets it.
   */
  headVariables(): tf.Variable[] {
    const head = this.config.tie_word_embeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
    return [...this.trainableParams()]
      .filter(([n, v]) => v.trainable && (n === head || n.includes('lm_head.')))
      .map(([, v]) => v);
  }

  /**
   * Per-token statistics of the LM head over `hidden` `[N, hidden]` in chunks of `chunk` rows,
   * as one differentiable op that keeps only its inputs (as {@link checkpointedLayer} does for a
   * layer): `stats(logits, targets)` maps one chunk's logits `[1, n, vocab]` and targets `[1, n]`
   * to `[K, n]`, and the op returns the chunks side by side, `[K, N]`. The forward frees each
   * chunk's logits before the next; the gradient recomputes each chunk's logits under a tape of
   * its own, so at most one chunk's vocabulary-wide rows are alive at once. Gradients reach
   * `hidden` and {@link headVariables}; they equal the unchunked pass's up to float summation
   * order (the head weight's gradient is summed over chunks).
   */
  chunkedHead(
    hidden: tf.Tensor2D,
    targets: tf.Tensor1D,
    chunk: number,
    stats: (logits: tf.Tensor3D, targets: tf.Tensor2D) => tf.Tensor2D,
  ): tf.Tensor2D {
    const [N, H] = hidden.shape;
    const vars = this.headVariables();
    // One chunk's statistics from its rows `[n, hidden]` and targets `[n]`.
    const chunkStats = (xc: tf.Tensor, tc: tf.Tensor): tf.Tensor2D => {
      const n = xc.shape[0]!;
      const logits = this.logitsFromHidden(tf.reshape(xc, [1, n, H])) as tf.Tensor3D;
      return stats(logits, tf.reshape(tc, [1, n]) as tf.Tensor2D);
    };
    const fn = tf.customGrad(((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const save = args[args.length - 1] as tf.GradSaveFunc;
      const [x, t] = args as [tf.Tensor, tf.Tensor];
      save([x, t]);
      const parts: tf.Tensor[] = [];
      for (let s = 0; s < N; s += chunk) {
        const n = Math.min(chunk, N - s);
        parts.push(tf.tidy(() => chunkStats(tf.slice(x, [s, 0], [n, H]), tf.slice(t, [s], [n]))));
      }
      const value = tf.concat(parts, 1);
      tf.dispose(parts);
      return {
        value,
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
          const [x0, t0] = saved as [tf.Tensor, tf.Tensor];
          const dxs: tf.Tensor[] = [];
          let dvars: tf.Tensor[] | undefined;
          for (let s = 0; s < N; s += chunk) {
            const n = Math.min(chunk, N - s);
            const dyc = tf.slice(dy, [0, s], [-1, n]);
            // The chunk's rows as an input of their own: their gradient is this chunk's dx.
            const xc = tf.slice(x0, [s, 0], [n, H]);
            const tc = tf.slice(t0, [s], [n]);
            const [dx, ...dv] = recomputeGrads(() => chunkStats(xc, tc), [xc, ...vars], dyc);
            dxs.push(dx!);
            if (!dvars) dvars = dv;
            else
              dvars = dvars.map((a, i) => {
                const sum = tf.add(a, dv[i]!);
                tf.dispose([a, dv[i]!]);
                return sum;
              });
            tf.dispose([dyc, xc, tc]);
          }
          const dx = tf.concat(dxs, 0);
          tf.dispose(dxs);
          return [dx, tf.zerosLike(t0), ...(dvars ?? [])];
        },
      };
    }) as unknown as Parameters<typeof tf.customGrad>[0]) as unknown as (
      ...xs: tf.Tensor[]
    ) => tf.Tensor2D;
    return fn(hidden, targets, ...vars);
  }

  /** LM-head logits `[..., vocab]` of hidden states `[..., hidden]`. */
  logitsFromHidden(hidden: tf.Tensor): tf.Tensor {
    const c = this.config;
    if (!c.tie_word_embeddings) return this.linear(hidden, 'lm_head.weight');
    const flat = this.mm(
      tf.reshape(hidden, [-1, c.hidden_size]),
      this.p('model.embed_tokens.weight'),
      false,
      true,
    );
    return tf.reshape(flat, [...hidden.shape.slice(0, -1), c.vocab_size]);
  }

  /** Critic values `[B, T]` from the value head. */
  values(hidden: tf.Tensor3D): tf.Tensor2D {
    const [B, T] = hidden.shape;
    return tf.reshape(this.linear(hidden, valueHeadName), [B, T]) as tf.Tensor2D;
  }

  /**
   * Reads tensors into host memory asynchronously (`readToHost`), so that the exports that
   * follow work on a backend that cannot read synchronously (webgpu): by default the trained
   * ones ({@link trainableParams}: what a trainer publishes and checkpoints), with `all` every
   * weight and the adapter ({@link exportWeights} and `lora.exportAdapter()` together). A no-op
   * where tensors are read synchronously anyway.
   */
  async readToHost(opts: { all?: boolean } = {}): Promise<void> {
    await readToHost(
      opts.all
        ? [...this.params.values(), ...(this.lora?.vars.values() ?? [])]
        : this.trainableParams().values(),
    );
  }

  /** Copies every weight out as float32 arrays in HF naming (`lm_head.weight` only when untied). */
  exportWeights(): NamedTensors {
    const out: NamedTensors = {};
    this.params.forEach((v, name) => {
      const data = v.dataSync() as Float32Array;
      const [rows = 0, cols = 0] = v.shape;
      out[name] = isStoredTransposed(name)
        ? { shape: [cols, rows], data: transposeArray(data, rows, cols) }
        : { shape: [...v.shape], data };
    });
    return out;
  }

  /**
   * Loads weights in place, under the rule of {@link checkTensors}. With `strict` (default) every
   * parameter must be given; without it a subset may be (a partial update). A value head sent to
   * a model without one is ignored (a critic's weights may reach a policy's engine).
   */
  importWeights(
    tensors: NamedTensors,
    opts: { strict?: boolean; source?: TensorSource } = {},
  ): void {
    const expected = new Map<string, number[]>();
    for (const [name, v] of this.params)
      expected.set(name, isStoredTransposed(name) ? [...v.shape].reverse() : v.shape);
    if (!expected.has(valueHeadName)) expected.set(valueHeadName, [1, this.config.hidden_size]);
    checkTensors(this.config, expected, tensors, {
      source: opts.source,
      partial: !(opts.strict ?? true),
    });
    for (const [name, t] of Object.entries(tensors)) {
      const v = this.params.get(name);
      // One tidy per tensor: a tidy around the loop would keep every replaced value alive until
      // the end, the weights twice on the backend.
      if (v) tf.tidy(() => v.assign(storedTensor(name, t)));
    }
  }

  /** Copies weights from another model of the same config (e.g. policy → reference). */
  copyFrom(other: CausalLM): void {
    tf.tidy(() => {
      for (const [name, v] of this.params) {
        const src = other.params.get(name);
        if (src) v.assign(src);
      }
    });
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.params.forEach((p) => p.dispose());
    this.detachLora();
    this.cos.dispose();
    this.sin.dispose();
    this.rot.dispose();
  }
}
