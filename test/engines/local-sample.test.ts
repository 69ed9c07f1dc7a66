/**
 * What the builtin and llama.cpp engines share (engines/local-sample.ts), run through both: a
 * request they cannot serve fails with the engine's typed error and a one-line reason, sample i
 * of `generateN` is `generate` with seed + i, and a closed engine refuses with `CLOSED`.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

import type { GenerateRequest, InferenceEngine } from '../../engines/types.ts';
import { builtinPrompt, builtinVocabSize, tinyBuiltinEngine } from './builtin-fixture.ts';
import { llamaCppMissing, tinyLlamaCppEngine } from './llamacpp-fixture.ts';

const test = suite('in-process engines: shared request handling');
const missing = await llamaCppMissing();

const engines: [
  string,
  { name: string; invalid: string; closed: string },
  () => Promise<InferenceEngine>,
][] = [
  [
    'builtin',
    { name: 'EngineError', invalid: 'CONFIG', closed: 'CLOSED' },
    () => tinyBuiltinEngine(),
  ],
  [
    'llamacpp',
    { name: 'LlamaCppError', invalid: 'LLAMACPP_INVALID', closed: 'LLAMACPP_CLOSED' },
    () => tinyLlamaCppEngine(),
  ],
];

async function rejection(
  p: Promise<unknown>,
): Promise<{ name: string; code: string; message: string }> {
  try {
    await p;
  } catch (e) {
    return e as { name: string; code: string; message: string };
  }
  throw new Error('expected a rejection');
}

if (missing) test('node-llama-cpp loads', () => assert.unreachable(missing));
for (const [kind, errors, make] of engines) {
  test(`${kind}: bad requests fail with ${errors.name} '${errors.invalid}' and a one-line reason`, async () => {
    const e = await make();
    try {
      const bad: [GenerateRequest, RegExp][] = [
        [{ inputIds: [] }, /inputIds is empty/],
        [{ inputIds: [3, builtinVocabSize] }, /inputIds must be integers in \[0, 40\)/],
        [{ inputIds: [3, 1.5] }, /inputIds must be integers/],
        [{ inputIds: Array.from({ length: 300 }, () => 3) }, /prompt of 300 tokens leaves no room/],
        [
          { inputIds: builtinPrompt, gconfig: { topLogprobs: 21 } },
          /topLogprobs must be an integer in \[0, 20\]/,
        ],
        [{ inputIds: builtinPrompt, gconfig: { stop: ['x'] } }, /stop strings need a tokenizer/],
        [{ inputIds: builtinPrompt, gconfig: { n: 2 } }, /gconfig.n must be 1; use generateN/],
      ];
      for (const [req, why] of bad) {
        const err = await rejection(e.generate(req));
        assert.is(err.name, errors.name);
        assert.is(err.code, errors.invalid);
        assert.match(err.message, why);
        assert.not.match(err.message, /\n/);
      }
    } finally {
      await e.close();
    }
  });

  test(`${kind}: sample i of generateN is generate with seed + i`, async () => {
    const e = await make();
    try {
      const g = { maxNewTokens: 12, temperature: 1, seed: 40 };
      const all = await e.generateN({ inputIds: builtinPrompt, gconfig: { ...g, n: 3 } });
      assert.is(all.length, 3);
      for (const [i, r] of all.entries()) {
        const one = await e.generate({ inputIds: builtinPrompt, gconfig: { ...g, seed: 40 + i } });
        assert.equal(r.outputTokens, one.outputTokens);
      }
      assert.not.equal(all[0]!.outputTokens, all[1]!.outputTokens);
    } finally {
      await e.close();
    }
  });

  test(`${kind}: a closed engine refuses with '${errors.closed}'`, async () => {
    const e = await make();
    await e.close();
    const err = await rejection(e.generate({ inputIds: builtinPrompt }));
    assert.is(err.name, errors.name);
    assert.is(err.code, errors.closed);
  });
}

test.run();
