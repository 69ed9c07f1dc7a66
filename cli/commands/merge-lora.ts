/**
 * `rtjob merge-lora ADAPTER --save-path DIR [--pretrain BASE]`: a PEFT LoRA adapter (one
 * `train_ppo --lora-rank` saved, or one HF PEFT wrote) merged into its base as a full HF model
 * directory, which every engine and tool loads without adapter support.
 *
 * @module
 */
import { resolve } from 'node:path';
import { mergeLoraCheckpoint } from '../../model/checkpoint.ts';
import { resolveCheckpointSpec } from '../../model/hub/index.ts';
import { readLoraAdapter } from '../../model/lora-adapter.ts';
import { CliError } from '../client.ts';

/** Flags of `rtjob merge-lora`, as commander hands them over. */
export interface MergeLoraFlags {
  savePath: string;
  pretrain?: string;
  saveDtype: string;
}

/** Runs `rtjob merge-lora`; the adapter and `--pretrain` may be Hub ids. */
export async function mergeLoraCommand(given: string, f: MergeLoraFlags): Promise<void> {
  if (f.saveDtype !== 'float32' && f.saveDtype !== 'bfloat16')
    throw new CliError(`--save-dtype: expected float32 or bfloat16, got '${f.saveDtype}'`, 2);
  let r;
  let adapter;
  try {
    adapter = await resolveCheckpointSpec(given, '<adapter>');
    // The base: --pretrain, else the adapter's base_model_name_or_path (often a Hub id).
    const named = f.pretrain ?? readLoraAdapter(adapter).config.baseModel;
    const base = named ? await resolveCheckpointSpec(named, '--pretrain') : undefined;
    r = mergeLoraCheckpoint(resolve(adapter), {
      ...(base ? { base: resolve(base) } : {}),
      savePath: resolve(f.savePath),
      dtype: f.saveDtype,
    });
  } catch (err) {
    throw new CliError((err as Error).message, 2);
  }
  process.stdout.write(
    `merged ${r.modules} adapted modules of ${resolve(adapter)} into ${r.base} -> ${resolve(f.savePath)}\n`,
  );
}
