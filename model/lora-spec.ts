/**
 * A role's LoRA settings (`--lora-rank`, `--lora-alpha`, `--target-modules`, `--lora-dropout`,
 * `--load-lora`, resolved) and how they attach an adapter to a loaded model; and the files of a
 * LoRA model's resumable checkpoint (`ModelTrainer.saveCheckpoint`).
 *
 * @module
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ModelError } from './errors.ts';
import { valueHeadName, type CausalLM } from './llama.ts';
import { readLoraAdapter, writeLoraAdapter, type LoraConfig } from './lora-adapter.ts';
import { parseSafetensors, serializeSafetensors } from './safetensors.ts';
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

/** The file beside a LoRA checkpoint's adapter that holds a critic's value head (trained in full). */
const valueHeadFile = 'value_head.safetensors';

/** Writes `model`'s adapter (PEFT's layout) and, for a critic, its value head into `dir`. */
export function saveLoraCheckpoint(dir: string, model: CausalLM): void {
  writeLoraAdapter(dir, model.lora!.exportAdapter());
  const head = model.params.get(valueHeadName);
  if (head)
    writeFileSync(
      join(dir, valueHeadFile),
      serializeSafetensors({
        [valueHeadName]: { shape: [1, head.shape[0]!], data: head.dataSync() as Float32Array },
      }),
    );
}

/** Restores what {@link saveLoraCheckpoint} wrote into a model with an adapter attached. */
export function loadLoraCheckpoint(dir: string, model: CausalLM): void {
  if (!model.lora)
    throw new ModelError(
      'MODEL_CHECKPOINT',
      `${dir} holds a LoRA adapter but the model being restored has none (train with --lora-rank)`,
    );
  model.loadLora(readLoraAdapter(dir));
  const headPath = join(dir, valueHeadFile);
  if (existsSync(headPath))
    model.importWeights(parseSafetensors(readFileSync(headPath), headPath).tensors, {
      strict: false,
      source: headPath,
    });
}
