/**
 * The model configuration: HF `config.json` of the Llama, Mistral, Qwen2 and Qwen3 families, in
 * the transformers v4 layout (`rope_theta`, `rope_scaling`, `torch_dtype`) or the v5 layout
 * (`rope_parameters`, `dtype`). A config is read strictly: anything this model does not compute
 * the way transformers does (an unknown `model_type`, MoE, `mlp_bias`, a sliding window that would
 * take effect, YaRN or dynamic RoPE scaling, ...) is refused with an error naming the field and
 * the file, instead of being loaded and silently computed differently.
 *
 * The file as read is kept (`raw`) and written back unchanged except for the dtype field, so a
 * saved policy has the config its base model had.
 *
 * @module
 */
import { RtjobError } from '../runtime/errors.ts';

/** The model families this implementation computes exactly as transformers does. */
export const modelFamilies = ['llama', 'mistral', 'qwen2', 'qwen3'] as const;
export type ModelFamily = (typeof modelFamilies)[number];

const causalLmClass: Record<ModelFamily, string> = {
  llama: 'LlamaForCausalLM',
  mistral: 'MistralForCausalLM',
  qwen2: 'Qwen2ForCausalLM',
  qwen3: 'Qwen3ForCausalLM',
};

/** RoPE frequency scaling, resolved from `rope_scaling` (v4) or `rope_parameters` (v5). */
export type RopeScaling =
  | { rope_type: 'default' }
  | { rope_type: 'linear'; factor: number }
  | {
      rope_type: 'llama3';
      factor: number;
      low_freq_factor: number;
      high_freq_factor: number;
      original_max_position_embeddings: number;
    };

/**
 * A resolved configuration: HF field names with HF's defaults filled in, plus what the family
 * implies (`qkv_bias`, `o_bias`, `qk_norm`), and the file as read in `raw`.
 */
export interface LlamaConfig {
  model_type: ModelFamily;
  architectures: string[];
  vocab_size: number;
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  /** Grouped-query attention; defaults to `num_attention_heads`. */
  num_key_value_heads: number;
  /** Defaults to `hidden_size / num_attention_heads` (Qwen3: 128, as `Qwen3Config` does). */
  head_dim: number;
  max_position_embeddings: number;
  rms_norm_eps: number;
  /** From `rope_theta` (v4) or `rope_parameters.rope_theta` (v5). */
  rope_theta: number;
  rope_scaling: RopeScaling;
  tie_word_embeddings: boolean;
  hidden_act: 'silu';
  /** Bias on q/k/v: Qwen2 always; Llama and Qwen3 under `attention_bias`. */
  qkv_bias: boolean;
  /** Bias on o_proj: Llama and Qwen3 under `attention_bias` (Qwen2 and Mistral never). */
  o_bias: boolean;
  /** Qwen3's per-head RMSNorm on queries and keys before RoPE (`q_norm`, `k_norm`). */
  qk_norm: boolean;
  bos_token_id: number | null;
  eos_token_id: number | number[] | null;
  pad_token_id: number | null;
  /** `config.json` as read (or as built), written back by `configJson` with only the dtype changed. */
  raw: Record<string, unknown>;
}

/** A config that this implementation refuses; the message names the field and the file. */
export class ConfigError extends RtjobError<'MODEL_CONFIG_UNSUPPORTED'> {
  override get name(): string {
    return 'ConfigError';
  }

  constructor(message: string) {
    super('MODEL_CONFIG_UNSUPPORTED', message);
  }
}

/** Defaults of the fields whose HF default differs by family. */
const familyDefaults: Record<ModelFamily, { maxPos: number; headDim?: number }> = {
  llama: { maxPos: 2048 },
  mistral: { maxPos: 4096 * 32 },
  qwen2: { maxPos: 32768 },
  qwen3: { maxPos: 32768, headDim: 128 },
};

/**
 * Fills defaults the way transformers does and refuses what this model does not implement.
 *
 * @param source the file the config came from, named in errors
 * @throws ConfigError naming the field and `source`
 * @example
 * const c = resolveConfig(JSON.parse(readFileSync('config.json', 'utf8')), 'config.json');
 */
export function resolveConfig(raw: Record<string, unknown>, source = 'config.json'): LlamaConfig {
  const fail = (msg: string): never => {
    throw new ConfigError(`${source}: ${msg}`);
  };
  const num = (k: string, d?: number): number => {
    const v = raw[k] ?? d;
    if (v === undefined) fail(`'${k}' is missing`);
    if (typeof v !== 'number' || !Number.isFinite(v))
      fail(`'${k}' must be a number, got ${JSON.stringify(v)}`);
    return v as number;
  };
  const type = String(raw.model_type ?? '');
  if (!(modelFamilies as readonly string[]).includes(type)) {
    fail(`model_type '${type}' is not supported (supported: ${modelFamilies.join(', ')})`);
  }
  const family = type as ModelFamily;
  const architectures = (raw.architectures as string[] | undefined) ?? [causalLmClass[family]];
  if (!Array.isArray(architectures) || architectures.some((a) => a !== causalLmClass[family])) {
    fail(
      `architectures ${JSON.stringify(raw.architectures)}: only ${causalLmClass[family]} is supported for model_type '${family}'`,
    );
  }
  const heads = num('num_attention_heads');
  const hidden = num('hidden_size');
  const layers = num('num_hidden_layers');
  const kv = num('num_key_value_heads', heads);
  // head_dim: null means "derive it" in Mistral's config; Qwen3Config defaults to 128.
  const headDim =
    raw.head_dim === null
      ? Math.floor(hidden / heads)
      : num('head_dim', familyDefaults[family].headDim ?? Math.floor(hidden / heads));
  const maxPos = num('max_position_embeddings', familyDefaults[family].maxPos);
  const act = String(raw.hidden_act ?? 'silu');
  if (act !== 'silu') fail(`hidden_act '${act}' is not supported (silu only)`);
  if (heads % kv !== 0)
    fail(`num_attention_heads ${heads} must be a multiple of num_key_value_heads ${kv}`);
  if (headDim % 2 !== 0) fail(`head_dim ${headDim} must be even (rotary embeddings)`);
  if (raw.mlp_bias) fail('mlp_bias is not supported');
  for (const k of [
    'num_experts',
    'num_local_experts',
    'n_routed_experts',
    'moe_intermediate_size',
  ]) {
    if (raw[k]) fail(`'${k}': mixture-of-experts models are not supported`);
  }
  if ((raw.partial_rotary_factor ?? 1) !== 1)
    fail(`partial_rotary_factor ${String(raw.partial_rotary_factor)} is not supported (1 only)`);
  if (Number(raw.attention_dropout ?? 0) !== 0) fail('attention_dropout > 0 is not supported');
  checkSlidingWindow(raw, family, layers, maxPos, fail);
  const { theta, scaling } = resolveRope(raw, fail);
  const attentionBias = Boolean(raw.attention_bias ?? false);
  return {
    model_type: family,
    architectures,
    vocab_size: num('vocab_size'),
    hidden_size: hidden,
    intermediate_size: num('intermediate_size'),
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: kv,
    head_dim: headDim,
    max_position_embeddings: maxPos,
    rms_norm_eps: num('rms_norm_eps', 1e-6),
    rope_theta: theta,
    rope_scaling: scaling,
    tie_word_embeddings: Boolean(raw.tie_word_embeddings ?? false),
    hidden_act: 'silu',
    qkv_bias: family === 'qwen2' || ((family === 'llama' || family === 'qwen3') && attentionBias),
    o_bias: (family === 'llama' || family === 'qwen3') && attentionBias,
    qk_norm: family === 'qwen3',
    bos_token_id: (raw.bos_token_id as number | null | undefined) ?? null,
    eos_token_id: (raw.eos_token_id as number | number[] | null | undefined) ?? null,
    pad_token_id: (raw.pad_token_id as number | null | undefined) ?? null,
    raw: structuredClone(raw),
  };
}

/**
 * Refuses a sliding window that would take effect: Mistral's `sliding_window` on every layer,
 * Qwen2/Qwen3's under `use_sliding_window` on layers from `max_window_layers` (or as
 * `layer_types` says). A window at least `max_position_embeddings` wide never masks anything.
 */
function checkSlidingWindow(
  raw: Record<string, unknown>,
  family: ModelFamily,
  layers: number,
  maxPos: number,
  fail: (m: string) => never,
): void {
  const window = raw.sliding_window;
  if (window === null || window === undefined || family === 'llama') return;
  if (typeof window !== 'number') fail(`sliding_window must be a number or null`);
  if ((window as number) >= maxPos) return;
  let slidingLayers = 0;
  if (family === 'mistral') slidingLayers = layers;
  else if (Array.isArray(raw.layer_types))
    slidingLayers = raw.layer_types.filter((t) => t === 'sliding_attention').length;
  else if (raw.use_sliding_window)
    slidingLayers = Math.max(0, layers - Number(raw.max_window_layers ?? 28));
  if (slidingLayers > 0) {
    fail(
      `sliding_window ${String(window)} < max_position_embeddings ${maxPos} takes effect on ${slidingLayers} layer(s); sliding-window attention is not supported`,
    );
  }
}

const ropeTypes = ['default', 'linear', 'llama3'];

/** theta and scaling from the v5 `rope_parameters` block or the v4 `rope_theta` + `rope_scaling`. */
function resolveRope(
  raw: Record<string, unknown>,
  fail: (m: string) => never,
): { theta: number; scaling: RopeScaling } {
  const v5 = raw.rope_parameters as Record<string, unknown> | null | undefined;
  const field = v5 ? 'rope_parameters' : 'rope_scaling';
  const block = (v5 ?? raw.rope_scaling ?? {}) as Record<string, unknown>;
  if (typeof block !== 'object' || Array.isArray(block)) fail(`${field} must be an object`);
  if (v5 && 'full_attention' in v5) fail('rope_parameters per layer type is not supported');
  let theta = 10000;
  if (v5 && v5.rope_theta !== undefined) {
    theta = v5.rope_theta as number;
    if (raw.rope_theta !== undefined && raw.rope_theta !== theta) {
      fail(
        `rope_theta ${String(raw.rope_theta)} disagrees with rope_parameters.rope_theta ${String(theta)}`,
      );
    }
  } else if (raw.rope_theta !== undefined) theta = raw.rope_theta as number;
  if (typeof theta !== 'number' || !(theta > 0)) fail(`rope_theta must be a positive number`);
  const type = String(block.rope_type ?? block.type ?? 'default');
  if (!ropeTypes.includes(type)) {
    fail(
      `${field}.rope_type '${type}' is not supported (${ropeTypes.join(', ')}; YaRN, dynamic and longrope scaling are not implemented)`,
    );
  }
  const need = (k: string): number => {
    const v = block[k];
    if (typeof v !== 'number' || !Number.isFinite(v))
      fail(`${field}.${k} must be a number for rope_type '${type}'`);
    return v as number;
  };
  if (type === 'linear') return { theta, scaling: { rope_type: 'linear', factor: need('factor') } };
  if (type === 'llama3') {
    return {
      theta,
      scaling: {
        rope_type: 'llama3',
        factor: need('factor'),
        low_freq_factor: need('low_freq_factor'),
        high_freq_factor: need('high_freq_factor'),
        original_max_position_embeddings: need('original_max_position_embeddings'),
      },
    };
  }
  return { theta, scaling: { rope_type: 'default' } };
}

/**
 * RoPE inverse frequencies (`head_dim / 2` of them), computed as transformers'
 * `ROPE_INIT_FUNCTIONS` do in float32: `theta^(-2i/d)`, divided by `factor` (linear), or Llama
 * 3's wavelength-dependent blend.
 */
export function ropeInvFreq(
  c: Pick<LlamaConfig, 'head_dim' | 'rope_theta' | 'rope_scaling'>,
): Float32Array {
  const half = c.head_dim / 2;
  const out = new Float32Array(half);
  const s = c.rope_scaling;
  for (let i = 0; i < half; i++) {
    // HF: 1 / base ** (arange(0, dim, 2).float() / dim), in float32.
    let f = Math.fround(1 / Math.fround(Math.pow(c.rope_theta, Math.fround((2 * i) / c.head_dim))));
    if (s.rope_type === 'linear') f = Math.fround(f / s.factor);
    else if (s.rope_type === 'llama3') {
      const old = s.original_max_position_embeddings;
      const lowWavelen = old / s.low_freq_factor;
      const highWavelen = old / s.high_freq_factor;
      const wavelen = (2 * Math.PI) / f;
      if (wavelen > lowWavelen) f = f / s.factor;
      else if (wavelen >= highWavelen) {
        const smooth =
          (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * (f / s.factor) + smooth * f;
      }
      f = Math.fround(f);
    }
    out[i] = f;
  }
  return out;
}

/** Which dtype a checkpoint's tensors are written in. */
export type SaveDtype = 'float32' | 'bfloat16';

/**
 * `config.json` text for a model saved in `dtype`: the config as read, with its dtype field
 * (`dtype` in v5 files, `torch_dtype` in v4 files) set to what the tensors now are.
 */
export function configJson(c: LlamaConfig, dtype: SaveDtype = 'float32'): string {
  const out: Record<string, unknown> = { ...c.raw };
  if ('dtype' in out || (!('torch_dtype' in out) && 'rope_parameters' in out)) out.dtype = dtype;
  else out.torch_dtype = dtype;
  return JSON.stringify(out, null, 2) + '\n';
}

/** HF tensor names and shapes ([out, in] for linear layers) this config implies, in order. */
export function parameterShapes(c: LlamaConfig): [string, number[]][] {
  const out: [string, number[]][] = [['model.embed_tokens.weight', [c.vocab_size, c.hidden_size]]];
  const q = c.num_attention_heads * c.head_dim;
  const kv = c.num_key_value_heads * c.head_dim;
  for (let i = 0; i < c.num_hidden_layers; i++) {
    const p = `model.layers.${i}.`;
    out.push([`${p}input_layernorm.weight`, [c.hidden_size]]);
    out.push([`${p}self_attn.q_proj.weight`, [q, c.hidden_size]]);
    out.push([`${p}self_attn.k_proj.weight`, [kv, c.hidden_size]]);
    out.push([`${p}self_attn.v_proj.weight`, [kv, c.hidden_size]]);
    if (c.qkv_bias) {
      out.push([`${p}self_attn.q_proj.bias`, [q]]);
      out.push([`${p}self_attn.k_proj.bias`, [kv]]);
      out.push([`${p}self_attn.v_proj.bias`, [kv]]);
    }
    if (c.qk_norm) {
      out.push([`${p}self_attn.q_norm.weight`, [c.head_dim]]);
      out.push([`${p}self_attn.k_norm.weight`, [c.head_dim]]);
    }
    out.push([`${p}self_attn.o_proj.weight`, [c.hidden_size, q]]);
    if (c.o_bias) out.push([`${p}self_attn.o_proj.bias`, [c.hidden_size]]);
    out.push([`${p}post_attention_layernorm.weight`, [c.hidden_size]]);
    out.push([`${p}mlp.gate_proj.weight`, [c.intermediate_size, c.hidden_size]]);
    out.push([`${p}mlp.up_proj.weight`, [c.intermediate_size, c.hidden_size]]);
    out.push([`${p}mlp.down_proj.weight`, [c.hidden_size, c.intermediate_size]]);
  }
  out.push(['model.norm.weight', [c.hidden_size]]);
  if (!c.tie_word_embeddings) out.push(['lm_head.weight', [c.vocab_size, c.hidden_size]]);
  return out;
}

/**
 * Tensors a checkpoint may carry that the model does not use, as transformers ignores them: the
 * tied model's `lm_head.weight` and the non-persistent `rotary_emb.inv_freq` buffers.
 */
export function isIgnorableTensor(c: LlamaConfig, name: string): boolean {
  return (
    (name === 'lm_head.weight' && c.tie_word_embeddings) || name.endsWith('rotary_emb.inv_freq')
  );
}
