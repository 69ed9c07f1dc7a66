import { suite } from 'uvu';
import * as assert from 'uvu/assert';

import type { LlamaCppEngine } from '../../engines/llamacpp/index.ts';
import { builtinPrompt, builtinVocabSize, checkpoints } from './builtin-fixture.ts';
import { registerConformance } from './conformance.ts';
import { llamaCppGenerating, llamaCppMissing, tinyLlamaCppEngine } from './llamacpp-fixture.ts';

const test = suite('llamacpp engine conformance');
const missing = await llamaCppMissing();
const ckpts = checkpoints();
let current: LlamaCppEngine | undefined;
test.after(() => ckpts.cleanup());

if (missing) {
  // node-llama-cpp is an optional dependency that `npm install` brings: missing is a failure.
  test('node-llama-cpp loads', () => assert.unreachable(missing));
} else {
  registerConformance(test, async () => (current = await tinyLlamaCppEngine()), {
    prompt: builtinPrompt,
    vocabSize: builtinVocabSize,
    longMaxNewTokens: 150,
    weightUpdate: ckpts.update,
    realWeights: true,
    whenGenerating: () => llamaCppGenerating(() => current),
  });
}

test.run();
