/**
 * The engine conformance suite: behaviour every {@link InferenceEngine} must show, registered on
 * a uvu suite for any engine factory. Run against the builtin engine and both HTTP engines.
 *
 * @example
 * const suite = suite('sglang conformance');
 * registerConformance(suite, () => Promise.resolve(new SglangEngine({ urls: [fake.url] })), { prompt: [5, 6, 7] });
 * suite.run();
 *
 * @module
 */
import type { Test } from 'uvu';
import * as assert from 'uvu/assert';

import type { GenerateResult, InferenceEngine, WeightUpdate } from '../../engines/types.ts';

/** What the suite needs to know about the engine under test. */
export interface ConformanceOptions {
  /** A prompt the engine accepts. */
  prompt: number[];
  /** Token ids are in `[0, vocabSize)`. */
  vocabSize: number;
  /** Builds the weight update for `version`; weight tests are skipped without it. */
  weightUpdate?: (version: number) => Promise<WeightUpdate>;
  /**
   * Resolves once a request in flight has produced a token; mid-flight tests (pause, update while
   * generating) are skipped without it.
   */
  whenGenerating?: () => Promise<void>;
  /** A token budget the engine takes long enough over for mid-flight tests (no natural stop). @default 200 */
  longMaxNewTokens?: number;
  /**
   * The engine computes real logits from the weights it was given (not a scripted generator), so
   * a greedy request across an update must equal the old weights' greedy tokens up to the update
   * and the new weights' greedy continuation of them after it (interruptible generation: no token
   * sampled from a cache of the old weights and labelled new).
   */
  realWeights?: boolean;
}

function assertAligned(r: GenerateResult, vocabSize: number): void {
  assert.is(r.outputLogprobs.length, r.outputTokens.length, 'one logprob per token');
  assert.is(r.outputVersions.length, r.outputTokens.length, 'one version per token');
  for (const t of r.outputTokens)
    assert.ok(Number.isInteger(t) && t >= 0 && t < vocabSize, `token ${t} in vocab`);
  for (const l of r.outputLogprobs) assert.ok(Number.isFinite(l) && l <= 1e-6, `logprob ${l} ≤ 0`);
  assert.ok(['stop', 'length', 'abort'].includes(r.stopReason));
}

function nonDecreasing(xs: number[]): boolean {
  return xs.every((x, i) => i === 0 || x >= xs[i - 1]!);
}

/** Registers the conformance tests on `suite`; each test makes a fresh engine and closes it. */
export function registerConformance(
  suite: Test,
  makeEngine: () => Promise<InferenceEngine>,
  opts: ConformanceOptions,
): void {
  const { prompt, vocabSize } = opts;
  const long = opts.longMaxNewTokens ?? 200;
  const withEngine = (fn: (e: InferenceEngine) => Promise<void>) => async () => {
    const e = await makeEngine();
    try {
      await fn(e);
    } finally {
      await e.close();
    }
  };

  suite(
    'generate returns aligned tokens, logprobs and versions',
    withEngine(async (e) => {
      const r = await e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 12 } });
      assertAligned(r, vocabSize);
      assert.ok(r.outputTokens.length >= 1 && r.outputTokens.length <= 12);
      assert.ok(r.outputVersions.every((v) => v === e.getVersion()));
      if (r.stopReason === 'length') assert.is(r.outputTokens.length, 12);
    }),
  );

  suite(
    'greedy decoding repeats, and a stop token id ends generation as its last token',
    withEngine(async (e) => {
      const a = await e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 10, greedy: true } });
      const b = await e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 10, greedy: true } });
      assert.equal(b.outputTokens, a.outputTokens);
      assert.ok(a.outputTokens.length >= 4, 'greedy run long enough to pick a stop token');
      const stopId = a.outputTokens[3]!;
      const upTo = a.outputTokens.indexOf(stopId);
      const c = await e.generate({
        inputIds: prompt,
        gconfig: { maxNewTokens: 10, greedy: true, stopTokenIds: [stopId] },
      });
      assert.is(c.stopReason, 'stop');
      assert.equal(c.outputTokens, a.outputTokens.slice(0, upTo + 1));
    }),
  );

  suite(
    'the same seed gives the same sample',
    withEngine(async (e) => {
      const g = { maxNewTokens: 16, seed: 1234 };
      const a = await e.generate({ inputIds: prompt, gconfig: g });
      const b = await e.generate({ inputIds: prompt, gconfig: g });
      assert.equal(b.outputTokens, a.outputTokens);
      assert.equal(
        b.outputLogprobs.map((x) => x.toFixed(5)),
        a.outputLogprobs.map((x) => x.toFixed(5)),
      );
    }),
  );

  suite(
    'generateN returns n samples; generate refuses n > 1',
    withEngine(async (e) => {
      const rs = await e.generateN({ inputIds: prompt, gconfig: { maxNewTokens: 8, n: 4 } });
      assert.is(rs.length, 4);
      for (const r of rs) assertAligned(r, vocabSize);
      let threw = false;
      await e.generate({ inputIds: prompt, gconfig: { n: 2 } }).catch(() => (threw = true));
      assert.ok(threw);
    }),
  );

  suite(
    'onTokens tells every output token once, in order, as it comes, before the call resolves',
    withEngine(async (e) => {
      const told: number[] = [];
      let resolved = false;
      let calls = 0;
      const r = await e
        .generate({
          inputIds: prompt,
          gconfig: { maxNewTokens: 10 },
          onTokens: (d) => {
            assert.is(d.sample, 0);
            assert.is(resolved, false, 'told before the call resolved');
            assert.is(d.logprobs.length, d.tokens.length);
            calls++;
            told.push(...d.tokens);
          },
        })
        .then((x) => ((resolved = true), x));
      assert.equal(told, r.outputTokens);
      // Streamed, not told in one burst at the end (HTTP engines: one call per server event).
      assert.ok(calls > 1, `onTokens called ${calls} times for ${told.length} tokens`);
      const bySample: number[][] = [[], [], []];
      const rs = await e.generateN({
        inputIds: prompt,
        gconfig: { maxNewTokens: 6, n: 3 },
        onTokens: (d) => bySample[d.sample]!.push(...d.tokens),
      });
      assert.equal(
        bySample,
        rs.map((x) => x.outputTokens),
      );
    }),
  );

  suite(
    'many concurrent requests all complete',
    withEngine(async (e) => {
      const rs = await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          e.generate({
            rid: `r${i}`,
            inputIds: prompt.concat([i % vocabSize]),
            gconfig: { maxNewTokens: 8 },
          }),
        ),
      );
      for (const r of rs) assertAligned(r, vocabSize);
    }),
  );

  suite(
    'sleep then wakeUp leaves the engine usable',
    withEngine(async (e) => {
      await e.sleep();
      await e.wakeUp();
      assertAligned(
        await e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 4 } }),
        vocabSize,
      );
    }),
  );

  suite('close makes later calls fail', async () => {
    const e = await makeEngine();
    await e.close();
    let threw = false;
    await e
      .generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } })
      .catch(() => (threw = true));
    assert.ok(threw);
  });

  const { weightUpdate, whenGenerating } = opts;
  if (weightUpdate) {
    suite(
      'updateWeights tags later tokens with the new version',
      withEngine(async (e) => {
        assert.is(e.getVersion(), 0);
        await e.updateWeights(await weightUpdate(1), 1);
        assert.is(e.getVersion(), 1);
        const r = await e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 6 } });
        assert.ok(r.outputVersions.every((v) => v === 1));
      }),
    );
  }

  if (weightUpdate && whenGenerating) {
    suite(
      'a request in flight across a weight update finishes, old tokens then new',
      withEngine(async (e) => {
        const update = await weightUpdate(1);
        const p = e.generate({ inputIds: prompt, gconfig: { maxNewTokens: long } });
        await whenGenerating();
        await e.updateWeights(update, 1);
        const r = await p;
        assertAligned(r, vocabSize);
        assert.is(r.stopReason, 'length');
        assert.is(r.outputTokens.length, long);
        assert.ok(nonDecreasing(r.outputVersions));
        assert.is(r.outputVersions[0], 0);
        assert.is(r.outputVersions.at(-1), 1);
      }),
    );
  }

  if (weightUpdate && whenGenerating && opts.realWeights) {
    suite(
      'a greedy request across a weight update: old weights up to it, the new weights continuing after it',
      withEngine(async (e) => {
        const update = await weightUpdate(1);
        const greedy = (inputIds: number[], maxNewTokens: number) =>
          e.generate({ inputIds, gconfig: { greedy: true, maxNewTokens } });
        const before = await greedy(prompt, long);
        const p = greedy(prompt, long);
        await whenGenerating();
        await e.updateWeights(update, 1);
        const r = await p;
        assert.is(r.outputTokens.length, long);
        const k = r.outputVersions.indexOf(1);
        assert.ok(k > 0 && k < long, `the update landed mid-request (first new token at ${k})`);
        assert.equal(r.outputVersions, [...Array(k).fill(0), ...Array(long - k).fill(1)]);
        assert.equal(r.outputTokens.slice(0, k), before.outputTokens.slice(0, k));
        const after = await greedy([...prompt, ...r.outputTokens.slice(0, k)], long - k);
        assert.equal(r.outputTokens.slice(k), after.outputTokens, 'tokens after the update');
        after.outputLogprobs.forEach((l, i) =>
          assert.ok(Math.abs(l - r.outputLogprobs[k + i]!) < 1e-4, `logprob ${k + i}`),
        );
      }),
    );
  }

  if (whenGenerating) {
    suite(
      'pause (abort) returns in-flight requests with abort and holds new ones until resume',
      withEngine(async (e) => {
        const p = e.generate({ inputIds: prompt, gconfig: { maxNewTokens: long } });
        await whenGenerating();
        await e.pause({ mode: 'abort' });
        const r = await p;
        assertAligned(r, vocabSize);
        assert.is(r.stopReason, 'abort');
        assert.ok(r.outputTokens.length < long);
        const held = e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 4 } });
        const first = await Promise.race([
          held.then(() => 'finished'),
          new Promise((res) => setTimeout(res, 150, 'held')),
        ]);
        assert.is(first, 'held');
        await e.resume();
        assertAligned(await held, vocabSize);
      }),
    );

    suite(
      'pause (wait) lets in-flight requests finish',
      withEngine(async (e) => {
        const p = e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 40 } });
        await whenGenerating();
        await e.pause({ mode: 'wait' });
        const r = await p;
        assert.is(r.stopReason, 'length');
        assert.is(r.outputTokens.length, 40);
        await e.resume();
      }),
    );
  }
}
