/**
 * The package's built-in job entrypoints: `rtjob submit -- train_ppo …` runs the PPO driver,
 * `train_sft` the SFT driver, `train_rm` the reward-model trainer. The CLI hands this table to the head it starts; the runtime itself
 * knows no entrypoint by name.
 *
 * @module
 */
import { ownModulePath } from '../ops/index.ts';

/** Built-in entrypoints and the driver file each runs. */
export const builtinEntrypoints: Readonly<Record<string, string>> = {
  train_ppo: ownModulePath('../train/ppo/main.ts', import.meta.url),
  train_sft: ownModulePath('../train/sft.ts', import.meta.url),
  train_rm: ownModulePath('../train/rm.ts', import.meta.url),
};
