/**
 * `gconfig.topLogprobs: k` on the HTTP engines against the fake servers, whose bigram model's
 * distribution the test computes itself: SGLang `top_logprobs_num` → `meta_info.output_top_logprobs`
 * (cumulative and incremental streaming), vLLM `logprobs: k` → `logprobs.top_logprobs` (the sampled
 * token plus the k most likely, up to k + 1 entries). Each position gets exactly the k most likely
 * tokens under the tempered distribution, most likely first, whole, streamed, and across a
 * sample interrupted and continued.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { isEngineError } from '../../engines/http/errors.ts';
import { httpCall } from '../../engines/http/http-call.ts';
import type { RemoteEngine } from '../../engines/http/remote-engine.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import type { GenerateResult, TokenDelta } from '../../engines/types.ts';
import { VllmEngine } from '../../engines/vllm/index.ts';
import type { FakeServer } from '../fakes/fake-server.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import { prompt, testGenerator, whenGenerating } from './fake-fixtures.ts';

const gen = testGenerator(1);
const temperature = 0.7;

/** The k most likely next tokens after `context` and their logprobs at `temperature`. */
function expectedTop(context: number[], k: number): { ids: number[]; logprobs: number[] } {
  const scaled = Array.from(gen.logits(context), (x) => x / temperature);
  const m = Math.max(...scaled);
  const lse = m + Math.log(scaled.reduce((a, x) => a + Math.exp(x - m), 0));
  const ids = Array.from(scaled.keys())
    .sort((a, b) => scaled[b]! - scaled[a]!)
    .slice(0, k);
  return { ids, logprobs: ids.map((i) => scaled[i]! - lse) };
}

function assertTop(r: GenerateResult, k: number): void {
  const top = r.outputTopLogprobs!;
  assert.is(top.length, r.outputTokens.length);
  top.forEach((t, i) => {
    const want = expectedTop([...prompt, ...r.outputTokens.slice(0, i)], k);
    assert.equal(t.ids, want.ids, `position ${i}`);
    t.logprobs.forEach((l, j) => assert.ok(Math.abs(l - want.logprobs[j]!) < 1e-9));
    // The sampled token's own logprob agrees with its entry when it is among the k.
    const at = t.ids.indexOf(r.outputTokens[i]!);
    if (at >= 0) assert.ok(Math.abs(t.logprobs[at]! - r.outputLogprobs[i]!) < 1e-9);
  });
}

const kinds: Array<{
  name: string;
  start: () => Promise<FakeServer>;
  engine: (url: string) => RemoteEngine;
}> = [
  {
    name: 'sglang',
    start: () => FakeSglangServer.start({ generator: gen }),
    engine: (url) => new SglangEngine({ urls: [url] }),
  },
  {
    name: 'sglang --incremental-streaming-output',
    start: () => FakeSglangServer.start({ generator: gen, incrementalStreamingOutput: true }),
    engine: (url) => new SglangEngine({ urls: [url], incrementalStreamingOutput: true }),
  },
  {
    name: 'vllm',
    start: () => FakeVllmServer.start({ generator: gen, logprobsMode: 'processed_logprobs' }),
    engine: (url) => new VllmEngine({ urls: [url], logprobsMode: 'processed_logprobs' }),
  },
];

for (const kind of kinds) {
  test(`${kind.name}: k alternatives per token, whole and streamed, n = 1 and n = 3`, async () => {
    const fake = await kind.start();
    const e = kind.engine(fake.url);
    try {
      const gconfig = { maxNewTokens: 12, temperature, topLogprobs: 3, seed: 4 };
      const whole = await e.generate({ inputIds: prompt, gconfig });
      assertTop(whole, 3);

      const told: TokenDelta[] = [];
      const streamed = await e.generate({
        inputIds: prompt,
        gconfig,
        onTokens: (d) => told.push(d),
      });
      assert.equal(streamed.outputTokens, whole.outputTokens, 'same seed, same sample');
      assert.equal(streamed.outputTopLogprobs, whole.outputTopLogprobs);
      assert.equal(
        told.flatMap((d) => d.top!),
        streamed.outputTopLogprobs,
        'the listener is told each token with its alternatives',
      );

      const many = await e.generateN({
        inputIds: prompt,
        gconfig: { ...gconfig, n: 3, topLogprobs: 1 },
        onTokens: () => {},
      });
      many.forEach((r) => assertTop(r, 1));
      // Without the request no alternatives come back.
      const none = await e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 4 } });
      assert.is(none.outputTopLogprobs, undefined);
    } finally {
      await e.close();
      await fake.close();
    }
  });
}

test('a sample the server aborts (someone else paused it) keeps one entry per token across its segments', async () => {
  const fake = await FakeSglangServer.start({ generator: testGenerator(2) });
  const e = new SglangEngine({ urls: [fake.url] });
  try {
    const pending = e.generate({
      inputIds: prompt,
      gconfig: { maxNewTokens: 60, temperature, topLogprobs: 2 },
    });
    await whenGenerating(fake)();
    await httpCall(`${fake.url}/pause_generation`, { mode: 'abort' }, { timeoutMs: 5000 });
    await fake.waitFor(() => fake.stats.generateRequests >= 2); // the re-send, held while paused
    await httpCall(`${fake.url}/continue_generation`, {}, { timeoutMs: 5000 });
    const r = await pending;
    assert.is(r.outputTokens.length, 60);
    assertTop(r, 2);
  } finally {
    await e.close();
    await fake.close();
  }
});

test('more alternatives than allowed: the engine refuses, and so does a vLLM server past --max-logprobs', async () => {
  const fake = await FakeVllmServer.start({ generator: gen, maxLogprobs: 5 });
  const strict = new VllmEngine({ urls: [fake.url] });
  const lax = new VllmEngine({ urls: [fake.url], maxTopLogprobs: 8, maxRetries: 0 });
  try {
    const tooMany = (e: RemoteEngine, k: number) =>
      e
        .generate({ inputIds: prompt, gconfig: { maxNewTokens: 2, topLogprobs: k } })
        .then(() => undefined)
        .catch((err: unknown) => err);
    const a = await tooMany(strict, 21);
    assert.ok(isEngineError(a) && a.code === 'CONFIG', String(a));
    assert.match((a as Error).message, /topLogprobs 21/);
    const b = await tooMany(lax, 6);
    assert.ok(isEngineError(b) && b.status === 400, String(b));
    assert.match((b as Error).message, /greater than max allowed: 5/);
  } finally {
    await strict.close();
    await lax.close();
    await fake.close();
  }
});

test.run();
