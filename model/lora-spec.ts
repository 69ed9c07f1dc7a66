/**
 * A role's LoRA settings (`--lora-rank`, `--lora-alpha`, `--target-modules`, `--lora-dropout`,
 * `--load-lora`, resolved) and how they attach an adapter to a loaded model.
 *
 * @module
 */
import type { CausalLM } from './llama.ts';
import { readLoraAdapter, type LoraConfig } from './lora-adapter.ts';
import type { LoraLayers } from './lora-layers.ts';
/**
 * How a role attaches its adapter (`train_ppo` / `train_sft`'s `--lora-*` flags, resolved): a new
 * one of this config, or the adapter in `adapterPath` (`--load-lora`), whose rank, alpha and
 * targets then win and whose dropout is `config.dropout`.
 */
export interface LoraSpec {
  config: LoraConfig;
  /** A PEFT adapter directory to start from. */
  adapterPath?: string;
  /** Seed of the A matrices of a new adapter. @default 0 */
  seed?: number;
}

/** Attaches `spec`'s adapter to `model` (see {@link LoraSpec}); returns it. */
export function attachLoraSpec(model: CausalLM, spec: LoraSpec): LoraLayers {
  if (!spec.adapterPath) return model.attachLora(spec.config, { seed: spec.seed ?? 0 });
  const adapter = readLoraAdapter(spec.adapterPath);
  return model.attachLora(
    { ...adapter.config, dropout: spec.config.dropout, baseModel: spec.config.baseModel },
    { adapter },
  );
}
