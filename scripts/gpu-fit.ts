/**
 * Prints model/README.md's table "What fits on one GPU, on paper": one training step's memory
 * for Qwen3-0.6B, 1.7B, 4B and 8B (their HF configs' shapes) at 2048 and 8192 tokens per
 * micro-batch, full fine-tuning against LoRA r=16 on every linear module, each with and without
 * gradient checkpointing, with CUDA's fused attention (no scores held). Every number comes from
 * `trainingMemory` (model/memory.ts, the formula the trainer checks before allocating) and the LoRA parameter count from `loraModules`
 * (model/lora-layers.ts, the modules an adapter attaches to), so the table is what the code
 * computes, not arithmetic typed by hand. GB are 10⁹ bytes.
 *
 * @example
 * node --import tsx scripts/gpu-fit.ts
 *
 * @module
 */
import { resolveConfig, type LlamaConfig } from '../model/config.ts';
import { parseTargetModules } from '../model/lora-adapter.ts';
import { loraModules } from '../model/lora-layers.ts';
import { defaultHeadChunkTokens, parameterCount, trainingMemory } from '../model/memory.ts';

/** Qwen3's published shapes (vocabulary 151,936, head_dim 128, q/k norms). */
function qwen3(
  hidden: number,
  intermediate: number,
  layers: number,
  heads: number,
  tied: boolean,
): LlamaConfig {
  return resolveConfig({
    model_type: 'qwen3',
    vocab_size: 151936,
    hidden_size: hidden,
    intermediate_size: intermediate,
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: 8,
    head_dim: 128,
    max_position_embeddings: 40960,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    tie_word_embeddings: tied,
  });
}

export const qwen3Shapes: Record<string, LlamaConfig> = {
  '0.6B': qwen3(1024, 3072, 28, 16, true),
  '1.7B': qwen3(2048, 6144, 28, 16, true),
  '4B': qwen3(2560, 9728, 36, 32, true),
  '8B': qwen3(4096, 12288, 36, 32, false),
};

/** Parameters of a rank-`r` adapter on every decoder-layer linear: r × (in + out) each. */
export function loraParameters(config: LlamaConfig, r: number): number {
  const modules = loraModules(config, {
    r,
    alpha: 2 * r,
    targetModules: parseTargetModules('all-linear'),
    dropout: 0,
    baseModel: '',
  });
  let n = 0;
  for (const [out, inp] of modules.values()) n += r * (inp + out);
  return n;
}

const gb = (bytes: number): string => (bytes / 1e9).toFixed(1);

/** The markdown table, one row per model and micro-batch size. */
export function gpuFitTable(tokensList = [2048, 8192], rank = 16): string {
  const header = [
    'model',
    'tokens',
    'params',
    'LoRA params',
    'weights',
    'grads + AdamW (full)',
    'activations plain / ckpt',
    'full',
    'LoRA',
    'full + ckpt',
    'LoRA + ckpt',
  ];
  const rows: string[][] = [];
  for (const tokens of tokensList)
    for (const [name, config] of Object.entries(qwen3Shapes)) {
      const all = parameterCount(config);
      const lora = loraParameters(config, rank);
      const adapter = { r: rank, targetModules: parseTargetModules('all-linear') };
      const at = (trainableParameters: number, gradientCheckpointing: boolean) =>
        trainingMemory(config, {
          tokens,
          trainableParameters,
          gradientCheckpointing,
          // On a GPU: CUDA's fused SDPA holds no attention scores.
          attention: 'fused',
          ...(trainableParameters === lora ? { lora: adapter } : {}),
          // What runs: checkpointing chunks the LM head (CausalLM.headChunkTokens).
          ...(gradientCheckpointing ? { headChunkTokens: defaultHeadChunkTokens } : {}),
        });
      const full = at(all, false);
      const fullCkpt = at(all, true);
      rows.push([
        name,
        String(tokens),
        `${(all / 1e9).toFixed(3)}B`,
        `${(lora / 1e6).toFixed(1)}M`,
        gb(full.weightsBytes),
        gb(full.gradientBytes + full.optimizerBytes),
        `${gb(full.activationBytes)} / ${gb(fullCkpt.activationBytes)}`,
        gb(full.totalBytes),
        gb(at(lora, false).totalBytes),
        gb(fullCkpt.totalBytes),
        gb(at(lora, true).totalBytes),
      ]);
    }
  const line = (cells: string[]) => `| ${cells.join(' | ')} |`;
  return [
    line(header),
    line(header.map((_, i) => (i < 1 ? '---' : '---:'))),
    ...rows.map(line),
  ].join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) console.log(gpuFitTable());
