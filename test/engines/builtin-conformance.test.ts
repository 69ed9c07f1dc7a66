import { suite } from 'uvu';

import type { BuiltinEngine } from '../../engines/builtin/index.ts';
import {
  builtinGenerating,
  builtinPrompt,
  builtinVocabSize,
  checkpoints,
  tinyBuiltinEngine,
} from './builtin-fixture.ts';
import { registerConformance } from './conformance.ts';

const test = suite('builtin engine conformance');
const ckpts = checkpoints();
let current: BuiltinEngine | undefined;
test.after(() => ckpts.cleanup());

registerConformance(test, async () => (current = await tinyBuiltinEngine()), {
  prompt: builtinPrompt,
  vocabSize: builtinVocabSize,
  longMaxNewTokens: 150,
  weightUpdate: ckpts.update,
  realWeights: true,
  whenGenerating: () => builtinGenerating(() => current),
});

test.run();
