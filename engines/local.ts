/**
 * The in-process engines behind one constructor: `builtin` (the TF.js model) and `llamacpp`
 * (llama.cpp on a GGUF written from the same weights). train_ppo's rollout, `rtjob serve` and the
 * evaluations of train_sft, eval_arith and eval_agent build their engine here, so `--engine` and
 * `--rollout-dtype` mean the same thing in every command.
 *
 * @module
 */
import type { GgufDtype } from '../model/gguf/index.ts';
import type { CausalLM } from '../model/llama.ts';
import type { ChatTokenizer } from '../model/tokenizer.ts';
import { BuiltinEngine } from './builtin/engine.ts';
import type { InferenceEngine } from './types.ts';

/** The engines that generate inside this process. */
export const localEngineKinds = ['builtin', 'llamacpp'] as const;
export type LocalEngineKind = (typeof localEngineKinds)[number];

/** Options of {@link createLocalEngine}. */
export interface LocalEngineOptions {
  /** @default 'builtin' */
  engine?: LocalEngineKind;
  /** HF model directory to load (or pass `model`). */
  modelPath?: string;
  /**
   * An already loaded model. The builtin engine computes with it (it sees the caller's weights);
   * llama.cpp converts a copy, so the caller sends later weights with `updateWeights`.
   */
  model?: CausalLM;
  /** Needed for stop strings; loaded from `modelPath` when present there. */
  tokenizer?: ChatTokenizer;
  /** Seed of the engine's sampling stream. @default 0 */
  seed?: number;
  /** llamacpp: element type of the GGUF's matrices (f32 reproduces the builtin tokens). @default 'f32' */
  dtype?: GgufDtype;
  /** builtin: most sequences decoded together. @default 256 */
  maxBatchSize?: number;
  /** llamacpp: sequences decoded together (their KV cache is allocated up front). @default 16 */
  maxSequences?: number;
  /** llamacpp: tokens one sequence holds (prompt + output). @default the model's, at most 4096 */
  contextSize?: number;
  /** llamacpp: a GPU build (`false`: the CPU build); fails rather than run on the CPU. @default false */
  gpu?: false | 'auto' | 'cuda' | 'vulkan';
}

/**
 * Builds a ready in-process engine. node-llama-cpp is loaded only for `llamacpp`, and fails with
 * a one-line `LLAMACPP_UNAVAILABLE` error naming the install command when it is missing.
 *
 * @example
 * const engine = await createLocalEngine({ engine: 'llamacpp', modelPath: dir, dtype: 'f32' });
 */
export async function createLocalEngine(o: LocalEngineOptions): Promise<InferenceEngine> {
  const { model, modelPath, tokenizer, seed = 0 } = o;
  if ((o.engine ?? 'builtin') === 'builtin')
    return BuiltinEngine.create({
      model,
      modelPath,
      tokenizer,
      seed,
      maxBatchSize: o.maxBatchSize,
    });
  const { LlamaCppEngine } = await import('./llamacpp/index.ts');
  return LlamaCppEngine.create({
    model,
    modelPath,
    tokenizer,
    seed,
    dtype: o.dtype ?? 'f32',
    maxSequences: o.maxSequences,
    contextSize: o.contextSize,
    gpu: o.gpu ?? false,
  });
}
