// The fake SGLang server generating with the builtin TF.js engine (EngineGenerator): the same
// conformance suite passes through the HTTP proxy, and the proxy returns the model's own tokens.
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

import type { BuiltinEngine } from '../../engines/builtin/index.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { EngineGenerator } from '../fakes/token-generator.ts';
import {
  builtinGenerating,
  builtinPrompt,
  builtinVocabSize,
  checkpoints,
  tinyBuiltinEngine,
} from './builtin-fixture.ts';
import { registerConformance } from './conformance.ts';

const test = suite('sglang engine → fake SGLang server → builtin engine');
const ckpts = checkpoints();
let builtin: BuiltinEngine;
let fake: FakeSglangServer;

test.before(async () => {
  builtin = await tinyBuiltinEngine();
  const generator = new EngineGenerator(builtin, {
    eosTokenId: -1,
    decode: (ids) => ids.join(' '),
  });
  fake = await FakeSglangServer.start({ generator });
});
test.after(async () => {
  await fake.close();
  await builtin.close();
  ckpts.cleanup();
});

test('the proxy returns what the model generates, logprobs included', async () => {
  const proxy = new SglangEngine({ urls: [fake.url] });
  try {
    const direct = await builtin.generate({
      inputIds: builtinPrompt,
      gconfig: { greedy: true, maxNewTokens: 8 },
    });
    const viaProxy = await proxy.generate({
      inputIds: builtinPrompt,
      gconfig: { greedy: true, maxNewTokens: 8 },
    });
    assert.equal(viaProxy.outputTokens, direct.outputTokens);
    assert.equal(viaProxy.outputLogprobs, direct.outputLogprobs);
  } finally {
    await proxy.close();
  }
});

registerConformance(test, async () => new SglangEngine({ urls: [fake.url] }), {
  prompt: builtinPrompt,
  vocabSize: builtinVocabSize,
  longMaxNewTokens: 150,
  weightUpdate: ckpts.update,
  realWeights: true,
  whenGenerating: () => builtinGenerating(() => builtin),
});

test.run();
