/**
 * The llama.cpp engine on the same tiny random model as the builtin engine tests, and a check
 * that `node-llama-cpp` (an optional dependency) loads here.
 *
 * @module
 */
import { setImmediate as tick } from 'node:timers/promises';

import { LlamaCppEngine, type LlamaCppEngineOptions } from '../../engines/llamacpp/index.ts';
import { initBackend } from '../../model/backend.ts';
import { randomModel, tinyLlamaConfig } from '../fixtures/model/tiny.ts';

/** Why the llama.cpp tests cannot run here, or undefined when they can. */
export async function llamaCppMissing(): Promise<string | undefined> {
  try {
    const m = await import('node-llama-cpp');
    await m.getLlama({ build: 'never', gpu: false, logLevel: m.LlamaLogLevel.error });
    return undefined;
  } catch (e) {
    return (e as Error).message.split('\n')[0];
  }
}

/**
 * A fresh engine on the builtin fixture's random tiny model (seed 11), with no eos; `shape`
 * overrides its config (e.g. 32-aligned sizes, so that q8_0 applies to every matrix).
 */
export async function tinyLlamaCppEngine(
  opts: Partial<LlamaCppEngineOptions> = {},
  seed = 11,
  shape: Record<string, unknown> = {},
): Promise<LlamaCppEngine> {
  await initBackend('wasm');
  const model = randomModel(tinyLlamaConfig({ max_position_embeddings: 256, ...shape }), seed);
  try {
    return await LlamaCppEngine.create({
      model,
      eosTokenIds: [],
      seed: 3,
      maxSequences: 8,
      ...opts,
    });
  } finally {
    model.dispose();
  }
}

/** Resolves once `engine()` has generated a token after this call. */
export async function llamaCppGenerating(engine: () => LlamaCppEngine | undefined): Promise<void> {
  const e = engine();
  const base = e?.stats.generatedTokens ?? 0;
  const deadline = Date.now() + 20_000;
  while (!e || e.stats.generatedTokens <= base) {
    if (Date.now() > deadline) throw new Error('the llamacpp engine generated nothing');
    await tick();
  }
}
