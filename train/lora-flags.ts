/**
 * The LoRA flags `train_ppo` and `train_sft` share, with OpenRLHF's names and defaults:
 * `--lora-rank` (0 = off), `--lora-alpha` (16), `--target-modules` (all-linear),
 * `--lora-dropout` (0); plus rtjob's `--load-lora DIR` (start from a PEFT adapter). Resolved
 * here, once, into the {@link LoraSpec} the trainer and critic roles attach.
 *
 * @module
 */
import { resolve } from 'node:path';
import { cachedCheckpoint, isCheckpointHubId } from '../model/hub/index.ts';
import { isLoraAdapterDir, parseTargetModules, readLoraAdapter } from '../model/lora-adapter.ts';
import type { LoraSpec } from '../model/lora-spec.ts';
import { FlagError, type FlagSpec } from './driver-flags.ts';

/** The flags' resolved values. */
export interface LoraFlagOptions {
  /** LoRA rank; 0 trains every weight. */
  loraRank: number;
  loraAlpha: number;
  /** `all-linear` or a comma-separated list of module names. */
  targetModules: string;
  loraDropout: number;
  /** A PEFT adapter directory to start from; implies LoRA with its rank, alpha and targets. */
  loadLora: string | undefined;
}

/** OpenRLHF's defaults (`--lora_rank 0`, `--lora_alpha 16`, `--target_modules all-linear`). */
export const loraFlagDefaults: LoraFlagOptions = {
  loraRank: 0,
  loraAlpha: 16,
  targetModules: 'all-linear',
  loraDropout: 0,
  loadLora: undefined,
};

/** The flag rows (each driver puts them in its own table). */
export const loraFlagSpecs: readonly FlagSpec<keyof LoraFlagOptions>[] = [
  {
    key: 'loraRank',
    kind: 'int',
    min: 0,
    help: 'train a LoRA adapter of this rank over the frozen base (0: train every weight); the adapter alone is saved (PEFT format) and synced to the engines. LoRA wants ~10x the full fine-tuning learning rate (README, tool-use run: --actor-learning-rate 1e-3 learns as full fine-tuning at 1e-4 does; at 1e-4 the adapter barely moves)',
  },
  { key: 'loraAlpha', kind: 'float', min: 0, help: 'LoRA alpha: the update is (alpha / rank)·B·A' },
  {
    key: 'targetModules',
    kind: 'string',
    help: 'modules LoRA adapts: all-linear (every decoder-layer linear) or a list, e.g. q_proj,v_proj',
  },
  {
    key: 'loraDropout',
    kind: 'float',
    min: 0,
    help: "dropout on the adapter's input while training",
  },
  {
    key: 'loadLora',
    kind: 'string',
    help: 'start from this PEFT adapter directory (its rank, alpha and targets; implies LoRA)',
  },
];

/**
 * The adapter a run's policy (or critic) trains, or undefined for full fine-tuning.
 *
 * @throws FlagError naming the flag: an unknown target module, dropout outside [0, 1), a
 *   `--load-lora` that is no adapter directory, or a `--lora-rank` that contradicts it
 */
export function loraSpecOf(
  o: LoraFlagOptions,
  pretrain: string,
  given: ReadonlySet<string> = new Set(),
  seed = 0,
): LoraSpec | undefined {
  if (!(o.loraDropout >= 0 && o.loraDropout < 1))
    throw new FlagError('--lora-dropout', `--lora-dropout must be in [0, 1), got ${o.loraDropout}`);
  let targetModules;
  try {
    targetModules = parseTargetModules(o.targetModules);
  } catch (e) {
    throw new FlagError('--target-modules', `--target-modules: ${(e as Error).message}`);
  }
  const config = {
    r: o.loraRank,
    alpha: o.loraAlpha,
    targetModules,
    dropout: o.loraDropout,
    baseModel: pretrain,
  };
  if (o.loadLora !== undefined) {
    // A Hub id the cache lacks is fetched by the driver before any role starts, and read then.
    if (isCheckpointHubId(o.loadLora) && !cachedCheckpoint(o.loadLora))
      return { config, adapterPath: o.loadLora, seed };
    const dir = cachedCheckpoint(o.loadLora) ?? resolve(o.loadLora);
    if (!isLoraAdapterDir(dir))
      throw new FlagError('--load-lora', `--load-lora: ${dir} has no adapter_config.json`);
    if (given.has('loraRank') || given.has('targetModules') || given.has('loraAlpha'))
      throw new FlagError(
        '--load-lora',
        '--load-lora takes rank, alpha and target modules from the adapter: drop --lora-rank, --lora-alpha and --target-modules',
      );
    const saved = readLoraAdapter(dir).config;
    return {
      config: { ...config, r: saved.r, alpha: saved.alpha, targetModules: saved.targetModules },
      adapterPath: dir,
      seed,
    };
  }
  if (!policyIsLora(o)) return undefined;
  return { config, seed };
}

/** The policy is a LoRA adapter (`--lora-rank` > 0 or `--load-lora`): the base is the reference. */
export function policyIsLora(o: Partial<Pick<LoraFlagOptions, 'loraRank' | 'loadLora'>>): boolean {
  return (o.loraRank ?? 0) > 0 || o.loadLora !== undefined;
}
