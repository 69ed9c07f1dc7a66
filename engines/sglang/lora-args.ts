/**
 * SGLang's server flags for run-time LoRA adapters (`engines/launcher.ts` `loraServerArgs`).
 *
 * @module
 */
import type { LoraServerSlots, ServerArgs } from '../types.ts';

/**
 * `--enable-lora --max-loras-per-batch S --max-loaded-loras S --max-lora-rank R
 * --lora-target-modules M...`.
 */
export function sglangLoraServerArgs(o: LoraServerSlots): ServerArgs {
  const slots = String(o.slots);
  return {
    args: [
      '--enable-lora',
      '--max-loras-per-batch',
      slots,
      '--max-loaded-loras',
      slots,
      '--max-lora-rank',
      String(o.rank),
      '--lora-target-modules',
      ...o.targetModules,
    ],
    env: {},
  };
}
