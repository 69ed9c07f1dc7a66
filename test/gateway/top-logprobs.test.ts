import { test } from 'uvu';
import * as assert from 'uvu/assert';
import OpenAI from 'openai';
import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import type { RemoteEngine } from '../../engines/http/remote-engine.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import { VllmEngine } from '../../engines/vllm/index.ts';
import type { Gateway } from '../../gateway/server.ts';
import { tinyMathModelDir } from '../../model/index.ts';
import { topLogprobs } from '../../model/sampling.ts';
import { loadTokenizer } from '../../model/tokenizer.ts';
import type { FakeServer } from '../fakes/fake-server.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { EngineGenerator } from '../fakes/token-generator.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import {
  compactToolTemplate,
  openaiClient,
  scriptedEngine,
  startGateway,
  tokenizerWith,
} from './helpers.ts';

// `logprobs: true, top_logprobs: k` through the `openai` client: real alternatives from the
// builtin engine (whole and streamed), the same through the SGLang and vLLM engines in front of
// fake servers that generate with that builtin model (SGLang `top_logprobs_num`, vLLM
// `logprobs: k`), and a 400 naming the field where the engine has none.
let builtin: BuiltinEngine;
let gw: Gateway;
let client: OpenAI;
const messages = [{ role: 'user' as const, content: 'What is 7 + 8?' }];
const tokenizer = loadTokenizer(tinyMathModelDir);
const http: Array<{ name: string; fake: FakeServer; engine: RemoteEngine; gw: Gateway }> = [];

test.before(async () => {
  builtin = await BuiltinEngine.create({ modelPath: tinyMathModelDir, seed: 5 });
  gw = await startGateway({ engine: builtin, tokenizer, contextLength: 256 });
  client = openaiClient(gw, gw.openSession().apiKey);
  const generator = new EngineGenerator(builtin, {
    eosTokenId: tokenizer.eosTokenId!,
    decode: (ids) => tokenizer.decode(ids, { skipSpecialTokens: false }),
  });
  const sglang = await FakeSglangServer.start({ generator });
  const vllm = await FakeVllmServer.start({ generator, logprobsMode: 'processed_logprobs' });
  for (const [name, fake, engine] of [
    ['sglang', sglang, new SglangEngine({ urls: [sglang.url] })],
    ['vllm', vllm, new VllmEngine({ urls: [vllm.url], logprobsMode: 'processed_logprobs' })],
  ] as const) {
    http.push({
      name,
      fake,
      engine,
      gw: await startGateway({ engine, tokenizer, contextLength: 256 }),
    });
  }
});
test.after(async () => {
  for (const h of http) {
    await h.gw.close();
    await h.engine.close();
    await h.fake.close();
  }
  await gw.close();
  await builtin.close();
});

test('topLogprobs picks the k largest of a row under the tempered distribution', () => {
  const logits = Float32Array.from([0.5, 3, -1, 3.5, 2, 0, 1.25]);
  const t = 0.7;
  const r = topLogprobs(logits, 0, logits.length, t, 3);
  assert.equal(r.ids, [3, 1, 4]);
  const logZ = Math.log([...logits].reduce((z, x) => z + Math.exp(x / t), 0));
  r.ids.forEach((id, j) => assert.ok(Math.abs(r.logprobs[j]! - (logits[id]! / t - logZ)) < 1e-9));
});

test('greedy: each token has k alternatives, most likely first, the first being the token', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 16,
    temperature: 0,
    logprobs: true,
    top_logprobs: 4,
  });
  const content = r.choices[0]!.logprobs!.content!;
  assert.is(content.length, r.usage!.completion_tokens);
  for (const e of content) {
    assert.is(e.top_logprobs.length, 4);
    assert.is(e.top_logprobs[0]!.token, e.token);
    assert.ok(Math.abs(e.top_logprobs[0]!.logprob - e.logprob) < 1e-6);
    const lps = e.top_logprobs.map((x) => x.logprob);
    assert.ok(
      lps.every((x, i) => i === 0 || x <= lps[i - 1]!),
      'sorted',
    );
    assert.ok(lps.reduce((s, x) => s + Math.exp(x), 0) <= 1 + 1e-6, 'a distribution');
  }
});

test('sampled and streamed: every chunk carries its tokens with their alternatives', async () => {
  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 16,
    temperature: 1,
    seed: 11,
    logprobs: true,
    top_logprobs: 2,
    stream: true,
    stream_options: { include_usage: true },
  });
  const entries: OpenAI.ChatCompletionTokenLogprob[] = [];
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const ch of stream) {
    entries.push(...(ch.choices[0]?.logprobs?.content ?? []));
    usage = ch.usage ?? usage;
  }
  assert.is(entries.length, usage!.completion_tokens);
  for (const e of entries) {
    assert.is(e.top_logprobs.length, 2);
    assert.ok(e.logprob <= e.top_logprobs[0]!.logprob + 1e-6);
    // A sampled token among the top two has the same logprob there.
    const same = e.top_logprobs.find((x) => x.token === e.token);
    if (same) assert.ok(Math.abs(same.logprob - e.logprob) < 1e-6);
  }
});

/** A greedy completion with `k` alternatives per token through `c`. */
function greedyTop(c: OpenAI, k: number) {
  return c.chat.completions.create({
    model: 'tiny',
    messages,
    max_tokens: 16,
    temperature: 0,
    logprobs: true,
    top_logprobs: k,
  });
}

for (const name of ['sglang', 'vllm']) {
  test(`${name} engine: the alternatives the builtin model gives, whole and streamed`, async () => {
    const h = http.find((x) => x.name === name)!;
    const c = openaiClient(h.gw, h.gw.openSession().apiKey);
    const before = h.fake.stats.generateRequests;
    const direct = await greedyTop(client, 4);
    const viaServer = await greedyTop(c, 4);
    assert.is(h.fake.stats.generateRequests - before, 1, 'the server generated the answer');
    const want = direct.choices[0]!.logprobs!.content!;
    const got = viaServer.choices[0]!.logprobs!.content!;
    assert.is(got.length, want.length);
    got.forEach((e, i) => {
      assert.is(e.token, want[i]!.token);
      assert.equal(
        e.top_logprobs.map((x) => x.token),
        want[i]!.top_logprobs.map((x) => x.token),
        `position ${i}`,
      );
      e.top_logprobs.forEach((x, j) =>
        assert.ok(Math.abs(x.logprob - want[i]!.top_logprobs[j]!.logprob) < 1e-6),
      );
    });

    // Streamed: the engine asks the server to stream, every chunk carries its alternatives.
    const stream = await c.chat.completions.create({
      model: 'tiny',
      messages,
      max_tokens: 16,
      temperature: 0,
      logprobs: true,
      top_logprobs: 4,
      stream: true,
    });
    const entries: OpenAI.ChatCompletionTokenLogprob[] = [];
    for await (const ch of stream) entries.push(...(ch.choices[0]?.logprobs?.content ?? []));
    assert.equal(
      entries.map((e) => e.top_logprobs.map((x) => x.token)),
      want.map((e) => e.top_logprobs.map((x) => x.token)),
    );
  });
}

test('an engine without alternatives, or top_logprobs without logprobs: 400 naming top_logprobs', async () => {
  const tok = tokenizerWith(compactToolTemplate);
  const g = await startGateway({ engine: scriptedEngine(tok, () => 'hi'), tokenizer: tok });
  try {
    const c = openaiClient(g, g.openSession().apiKey);
    for (const body of [{ logprobs: true, top_logprobs: 2 }, { top_logprobs: 2 }]) {
      const err = await c.chat.completions
        .create({ model: 'tiny', messages, ...body })
        .then(() => undefined)
        .catch((e: unknown) => e);
      assert.instance(err, OpenAI.BadRequestError);
      assert.is((err as InstanceType<typeof OpenAI.BadRequestError>).param, 'top_logprobs');
      assert.match((err as Error).message, /top_logprobs/);
    }
    // logprobs alone still works there.
    const r = await c.chat.completions.create({ model: 'tiny', messages, logprobs: true });
    assert.ok(r.choices[0]!.logprobs!.content!.every((e) => e.top_logprobs.length === 0));
  } finally {
    await g.close();
  }
});

test.run();
