import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { builtinPrompt, tinyBuiltinEngine } from './builtin-fixture.ts';

// `onTokens` listeners run inside the builtin engine's decode step. One that pauses (abort) the
// engine there gets the requests back at once with the tokens told so far, and nothing is added
// to a result after it was returned.
test('a listener that pauses the engine mid-step: every request returns abort with what it was told', async () => {
  const e = await tinyBuiltinEngine();
  try {
    const told: number[][] = [[], []];
    let paused = false;
    const run = (i: number) =>
      e.generate({
        inputIds: builtinPrompt,
        gconfig: { maxNewTokens: 40, seed: i },
        onTokens: (d) => {
          told[i]!.push(...d.tokens);
          if (i === 0 && told[0]!.length === 3 && !paused) {
            paused = true;
            void e.pause({ mode: 'abort' });
          }
        },
      });
    const [a, b] = await Promise.all([run(0), run(1)]);
    assert.is(a.stopReason, 'abort');
    assert.is(b.stopReason, 'abort');
    assert.equal(a.outputTokens, told[0]);
    assert.is(a.outputTokens.length, 3);
    assert.equal(b.outputTokens, told[1]);
    const frozen = [a.outputTokens.length, b.outputTokens.length];
    await e.resume();
    await e.generate({ inputIds: builtinPrompt, gconfig: { maxNewTokens: 4 } });
    assert.equal(
      [a.outputTokens.length, b.outputTokens.length],
      frozen,
      'results stay as returned',
    );
    assert.equal([a.outputVersions.length, b.outputLogprobs.length], frozen);
  } finally {
    await e.close();
  }
});

test.run();
