/**
 * vLLM's server flags for run-time LoRA adapters (`engines/launcher.ts` `loraServerArgs`).
 *
 * @module
 */
import { InvalidArgumentError } from '../../runtime/errors.ts';
import type { LoraServerSlots, ServerArgs } from '../types.ts';

/** The ranks vLLM's `--max-lora-rank` takes (its `MaxLoRARanks`). */
const vllmLoraRanks = [1, 8, 16, 32, 64, 128, 256, 320, 512];

/**
 * `--enable-lora --max-loras S --max-cpu-loras S --max-lora-rank R` (R rounded up to a rank vLLM
 * takes) with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`, which enables `/v1/load_lora_adapter`.
 */
export function vllmLoraServerArgs(o: LoraServerSlots): ServerArgs {
  const rank = vllmLoraRanks.find((r) => r >= o.rank);
  if (rank === undefined)
    throw new InvalidArgumentError(`vLLM serves LoRA ranks up to 512, not ${o.rank}`);
  const slots = String(o.slots);
  return {
    args: [
      '--enable-lora',
      '--max-loras',
      slots,
      '--max-cpu-loras',
      slots,
      '--max-lora-rank',
      String(rank),
    ],
    env: { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' },
  };
}
