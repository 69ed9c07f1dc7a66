/**
 * A tiny random builtin engine for engine tests: the conformance suite runs against it directly
 * and behind a fake server (as the fake's token generator).
 *
 * @module
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as tick } from 'node:timers/promises';

import { BuiltinEngine } from '../../engines/builtin/index.ts';
import type { WeightUpdate } from '../../engines/types.ts';
import { initBackend } from '../../model/backend.ts';
import { saveModel } from '../../model/checkpoint.ts';
import { randomModel, tinyLlamaConfig } from '../fixtures/model/tiny.ts';

export const builtinVocabSize = 40;
export const builtinPrompt = [3, 5, 7, 9];
const config = () => tinyLlamaConfig({ max_position_embeddings: 256 });

/** A fresh engine on a random tiny model, with no eos so budgets run out. */
export async function tinyBuiltinEngine(seed = 11): Promise<BuiltinEngine> {
  await initBackend('wasm');
  return BuiltinEngine.create({ model: randomModel(config(), seed), eosTokenIds: [], seed: 3 });
}

/** Checkpoint directories of other random weights, removed by `cleanup`. */
export function checkpoints(): {
  update: (version: number) => Promise<WeightUpdate>;
  cleanup: () => void;
} {
  const dirs: string[] = [];
  return {
    update: async (version) => {
      const dir = mkdtempSync(join(tmpdir(), 'rtjob-ckpt-'));
      dirs.push(dir);
      const m = randomModel(config(), 100 + version);
      saveModel(dir, m);
      m.dispose();
      return { kind: 'disk', path: dir };
    },
    cleanup: () => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })),
  };
}

/** Resolves once `engine()` has generated a token after this call. */
export async function builtinGenerating(engine: () => BuiltinEngine | undefined): Promise<void> {
  const e = engine();
  const base = e?.stats.generatedTokens ?? 0;
  const deadline = Date.now() + 20_000;
  while (!e || e.stats.generatedTokens <= base) {
    if (Date.now() > deadline) throw new Error('the builtin engine generated nothing');
    await tick();
  }
}
