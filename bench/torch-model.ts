/**
 * The Qwen3-0.6B-shaped model that the torch benchmarks time (`bench/torch.ts` on CPU,
 * `scripts/gpu-torch-bench.ts` on a GPU): Qwen3-0.6B's config cut to `layers` decoder layers and,
 * for quick runs, a smaller vocabulary, with random weights from a fast PRNG (speed does not depend
 * on the values; TF.js' own normal sampler takes minutes at 187M parameters).
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { parameterShapes, resolveConfig, type LlamaConfig } from '../model/config.ts';
import type { NamedTensors } from '../model/tensors.ts';

/** The Qwen3-0.6B config file, relative to the checkout root. */
export const qwen3ConfigPath = 'test/fixtures/model/configs/qwen3-0.6b.json';

/** Qwen3-0.6B's config with `layers` decoder layers and `vocab` tokens (default: its own). */
export function qwen3Cut(layers: number, vocab?: number): LlamaConfig {
  // From the checkout root (the GPU script also runs bundled, from another folder).
  const raw = JSON.parse(readFileSync(qwen3ConfigPath, 'utf8')) as Record<string, unknown>;
  return resolveConfig({
    ...raw,
    num_hidden_layers: layers,
    vocab_size: vocab ?? raw['vocab_size'],
    max_position_embeddings: 4096,
  });
}

/** Normal-ish values from a xorshift PRNG (sum of 4 uniforms), standard deviation `std`. */
function fastRandom(n: number, seed: number, std: number): Float32Array {
  const a = new Float32Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    let u = 0;
    for (let j = 0; j < 4; j++) {
      s ^= s << 13;
      s ^= s >>> 17;
      s ^= s << 5;
      u += (s >>> 0) / 4294967296;
    }
    a[i] = (u - 2) * std * 1.732;
  }
  return a;
}

/** Random weights for `config`: norms 1, everything else std 0.02 (as PyTorch's reference). */
export function randomWeights(config: LlamaConfig): NamedTensors {
  const tensors: NamedTensors = {};
  parameterShapes(config).forEach(([name, shape], i) => {
    const n = shape.reduce((x, y) => x * y, 1);
    tensors[name] = {
      shape,
      data: name.endsWith('norm.weight') ? new Float32Array(n).fill(1) : fastRandom(n, i + 1, 0.02),
    };
  });
  return tensors;
}
