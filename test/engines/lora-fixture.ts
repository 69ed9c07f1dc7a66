/**
 * LoRA adapters for engine tests: random A and B (B nonzero, unlike PEFT's initialisation, so
 * the adapter changes what the model computes) on every linear module of a base checkpoint.
 *
 * @module
 */
import { loraTargetModules, peftTensorName, type LoraAdapter } from '../../model/lora-adapter.ts';
import { seededRandom } from '../../model/sampling.ts';
import type { NamedTensors } from '../../model/tensors.ts';

/** A rank-`r` adapter on every linear module, A and B random (B nonzero, unlike PEFT's init). */
export function randomAdapter(
  base: NamedTensors,
  r: number,
  alpha: number,
  seed: number,
): LoraAdapter {
  const rand = seededRandom(seed);
  const normal = (n: number, s: number) =>
    Float32Array.from(
      { length: n },
      () => s * Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand()),
    );
  const tensors: NamedTensors = {};
  for (const [name, w] of Object.entries(base)) {
    const m = /^(model\.layers\.\d+\.(?:self_attn|mlp)\.(\w+))\.weight$/.exec(name);
    if (!m || !(loraTargetModules as readonly string[]).includes(m[2]!)) continue;
    const [out, inp] = w.shape as [number, number];
    tensors[peftTensorName(m[1]!, 'A')] = { shape: [r, inp], data: normal(r * inp, 0.3) };
    tensors[peftTensorName(m[1]!, 'B')] = { shape: [out, r], data: normal(out * r, 0.3) };
  }
  return {
    config: { r, alpha, targetModules: [...loraTargetModules], dropout: 0, baseModel: 'tiny' },
    tensors,
  };
}
