/**
 * The model configuration in HF `config.json` field names (`LlamaConfig` / `Qwen2Config`).
 *
 * @module
 */

/** The subset of an HF Llama/Qwen2 `config.json` this model reads and writes. */
export interface LlamaConfig {
  /** `LlamaForCausalLM` or `Qwen2ForCausalLM`; both load here. */
  architectures?: string[];
  model_type: string;
  vocab_size: number;
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  /** Grouped-query attention; defaults to `num_attention_heads`. */
  num_key_value_heads: number;
  /** Defaults to `hidden_size / num_attention_heads`. */
  head_dim: number;
  max_position_embeddings: number;
  rms_norm_eps: number;
  rope_theta: number;
  tie_word_embeddings: boolean;
  /** Bias on q/k/v projections (Qwen2 has it; Llama's `attention_bias` flag). */
  attention_bias: boolean;
  hidden_act: string;
  bos_token_id?: number | null;
  eos_token_id?: number | number[] | null;
  pad_token_id?: number | null;
  torch_dtype?: string;
}

/**
 * Fills defaults the way HF does and checks the fields this implementation depends on.
 *
 * @throws Error naming the bad field
 */
export function resolveConfig(raw: Record<string, unknown>): LlamaConfig {
  const num = (k: string, d?: number): number => {
    const v = raw[k] ?? d;
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new Error(`config.json: '${k}' must be a number`);
    return v;
  };
  const modelType = String(raw.model_type ?? 'llama');
  const heads = num('num_attention_heads');
  const hidden = num('hidden_size');
  const kv = num('num_key_value_heads', heads);
  const headDim = num('head_dim', Math.floor(hidden / heads));
  const act = String(raw.hidden_act ?? 'silu');
  if (act !== 'silu') throw new Error(`config.json: hidden_act '${act}' is not supported (silu only)`);
  if (heads % kv !== 0) throw new Error('config.json: num_attention_heads must be a multiple of num_key_value_heads');
  if (headDim % 2 !== 0) throw new Error('config.json: head_dim must be even (rotary embeddings)');
  if (raw.mlp_bias) throw new Error('config.json: mlp_bias is not supported');
  const ropeScaling = raw.rope_scaling as { type?: string; rope_type?: string } | null | undefined;
  if (ropeScaling && (ropeScaling.rope_type ?? ropeScaling.type ?? 'default') !== 'default') {
    throw new Error('config.json: rope_scaling is not supported');
  }
  return {
    architectures: (raw.architectures as string[] | undefined) ?? [modelType === 'qwen2' ? 'Qwen2ForCausalLM' : 'LlamaForCausalLM'],
    model_type: modelType,
    vocab_size: num('vocab_size'),
    hidden_size: hidden,
    intermediate_size: num('intermediate_size'),
    num_hidden_layers: num('num_hidden_layers'),
    num_attention_heads: heads,
    num_key_value_heads: kv,
    head_dim: headDim,
    max_position_embeddings: num('max_position_embeddings', 2048),
    rms_norm_eps: num('rms_norm_eps', 1e-6),
    rope_theta: num('rope_theta', 10000),
    tie_word_embeddings: Boolean(raw.tie_word_embeddings ?? false),
    attention_bias: Boolean(raw.attention_bias ?? modelType === 'qwen2'),
    hidden_act: act,
    bos_token_id: (raw.bos_token_id as number | null | undefined) ?? null,
    eos_token_id: (raw.eos_token_id as number | number[] | null | undefined) ?? null,
    pad_token_id: (raw.pad_token_id as number | null | undefined) ?? null,
    torch_dtype: 'float32',
  };
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
    if (c.attention_bias) {
      out.push([`${p}self_attn.q_proj.bias`, [q]]);
      out.push([`${p}self_attn.k_proj.bias`, [kv]]);
      out.push([`${p}self_attn.v_proj.bias`, [kv]]);
    }
    out.push([`${p}self_attn.o_proj.weight`, [c.hidden_size, q]]);
    out.push([`${p}post_attention_layernorm.weight`, [c.hidden_size]]);
    out.push([`${p}mlp.gate_proj.weight`, [c.intermediate_size, c.hidden_size]]);
    out.push([`${p}mlp.up_proj.weight`, [c.intermediate_size, c.hidden_size]]);
    out.push([`${p}mlp.down_proj.weight`, [c.hidden_size, c.intermediate_size]]);
  }
  out.push(['model.norm.weight', [c.hidden_size]]);
  if (!c.tie_word_embeddings) out.push(['lm_head.weight', [c.vocab_size, c.hidden_size]]);
  return out;
}
