import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { isEngineError } from '../../engines/http/errors.ts';
import { VllmEngine } from '../../engines/vllm/index.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import {
  prompt,
  tempDir,
  testGenerator,
  whenGenerating,
  writeFakeCheckpoint,
} from './fake-fixtures.ts';

const gen = testGenerator(1);
const dir = tempDir();
let raw: FakeVllmServer;
let processed: FakeVllmServer;

test.before(async () => {
  raw = await FakeVllmServer.start({ generator: gen, modelPath: dir.path, servedModelName: 'm' });
  processed = await FakeVllmServer.start({
    generator: gen,
    modelPath: dir.path,
    logprobsMode: 'processed_logprobs',
  });
});
test.after(async () => {
  await raw.close();
  await processed.close();
  dir.cleanup();
});

async function using<T>(e: VllmEngine, fn: (e: VllmEngine) => Promise<T>): Promise<T> {
  try {
    return await fn(e);
  } finally {
    await e.close();
  }
}

function logSoftmaxAt(context: number[], token: number, temperature: number): number {
  const scaled = Array.from(gen.logits(context), (x) => x / temperature);
  const m = Math.max(...scaled);
  return scaled[token]! - (m + Math.log(scaled.reduce((a, x) => a + Math.exp(x - m), 0)));
}

test('maps the generation config onto /v1/completions field by field', () =>
  using(new VllmEngine({ urls: [raw.url], model: 'm' }), async (e) => {
    await e.generate({
      inputIds: prompt,
      gconfig: {
        maxNewTokens: 7,
        minNewTokens: 1,
        topP: 0.8,
        topK: 4,
        stopTokenIds: [3],
        stop: ['q'],
        seed: 5,
      },
    });
    assert.equal(raw.generateBodies.at(-1), {
      prompt,
      max_tokens: 7,
      min_tokens: 1,
      temperature: 1,
      top_p: 0.8,
      top_k: 4,
      stop_token_ids: [3],
      ignore_eos: false,
      logprobs: 0,
      return_tokens_as_token_ids: true,
      n: 1,
      stream: false,
      model: 'm',
      stop: ['q'],
      seed: 5,
    });
  }));

test('parses token_id:N tokens and token_logprobs; n choices in index order', () =>
  using(new VllmEngine({ urls: [raw.url] }), async (e) => {
    const [a, b] = await e.generateN({
      inputIds: prompt,
      gconfig: { maxNewTokens: 6, n: 2, seed: 77 },
    });
    for (const r of [a!, b!]) {
      const ctx = prompt.slice();
      r.outputTokens.forEach((t, i) => {
        assert.ok(Math.abs(r.outputLogprobs[i]! - logSoftmaxAt(ctx, t, 1)) < 1e-9);
        ctx.push(t);
      });
    }
    const again = await e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 6, seed: 77 } });
    assert.equal(again.outputTokens, a!.outputTokens);
  }));

test('raw logprobs (the vLLM default): temperatures other than 1 are refused with the fix', () =>
  using(new VllmEngine({ urls: [raw.url] }), async (e) => {
    const err = await e
      .generate({ inputIds: prompt, gconfig: { temperature: 0.5 } })
      .catch((x: unknown) => x);
    assert.ok(isEngineError(err) && err.code === 'CONFIG');
    assert.match(err.message, /processed_logprobs/);
    assert.is(
      (await e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 3, greedy: true } }))
        .outputTokens.length,
      3,
    );
  }));

test('processed logprobs: tempered logprobs come back at any temperature', () =>
  using(
    new VllmEngine({ urls: [processed.url], logprobsMode: 'processed_logprobs' }),
    async (e) => {
      const r = await e.generate({
        inputIds: prompt,
        gconfig: { maxNewTokens: 5, temperature: 0.5 },
      });
      const ctx = prompt.slice();
      r.outputTokens.forEach((t, i) => {
        assert.ok(Math.abs(r.outputLogprobs[i]! - logSoftmaxAt(ctx, t, 0.5)) < 1e-9);
        ctx.push(t);
      });
    },
  ));

test('a server that ignores return_tokens_as_token_ids is a protocol error', () =>
  using(
    new VllmEngine({ urls: [raw.url], extraBody: { return_tokens_as_token_ids: false } }),
    async (e) => {
      const err = await e
        .generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } })
        .catch((x: unknown) => x);
      assert.ok(isEngineError(err) && err.code === 'PROTOCOL');
    },
  ));

test('default reload: sleep level 2, wake weights, collective_rpc reload_weights, wake KV cache', () =>
  using(new VllmEngine({ urls: [raw.url], servedModelPath: dir.path }), async (e) => {
    const loads = raw.stats.weightLoads;
    await e.updateWeights({ kind: 'disk', path: writeFakeCheckpoint(dir.path, 2) }, 2);
    assert.is(raw.stats.weightLoads, loads + 1);
    assert.not.ok(raw.hasDiscardedWeights);
    assert.is(
      (await e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } })).outputVersions[0],
      2,
    );
    const err = await e
      .updateWeights({ kind: 'disk', path: '/elsewhere' }, 3)
      .catch((x: unknown) => x);
    assert.ok(isEngineError(err) && err.code === 'CONFIG');
    assert.is(e.getVersion(), 2);
  }));

test("reload 'areal' and custom routes post the checkpoint path", async () => {
  const other = tempDir();
  try {
    await using(new VllmEngine({ urls: [raw.url], reload: 'areal' }), async (e) => {
      const loads = raw.stats.weightLoads;
      await e.updateWeights({ kind: 'disk', path: writeFakeCheckpoint(other.path, 3) }, 3);
      assert.is(raw.stats.weightLoads, loads + 1);
    });
    const seen: Array<[string, number]> = [];
    const custom = {
      path: '/areal_update_weights',
      body: (p: string, v: number) => (seen.push([p, v]), { model_path: p }),
    };
    await using(new VllmEngine({ urls: [raw.url], reload: custom }), async (e) => {
      await e.updateWeights({ kind: 'disk', path: other.path }, 9);
      assert.equal(seen, [[other.path, 9]]);
    });
  } finally {
    other.cleanup();
  }
});

test('sleep and wakeUp use /sleep?level and /wake_up', () =>
  using(new VllmEngine({ urls: [raw.url], sleepLevel: 1 }), async (e) => {
    await e.sleep();
    const res = await fetch(`${raw.url}/is_sleeping`);
    assert.equal(await res.json(), { is_sleeping: true });
    await e.wakeUp();
    assert.equal(await (await fetch(`${raw.url}/is_sleeping`)).json(), { is_sleeping: false });
  }));

test('without the dev-mode /pause route, pause cancels in-flight requests client-side', async () => {
  const plain = await FakeVllmServer.start({ generator: gen, modelPath: dir.path, devMode: false });
  try {
    await using(new VllmEngine({ urls: [plain.url], reload: 'areal' }), async (e) => {
      const p = e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 150 } });
      await whenGenerating(plain)();
      await e.pause();
      const r = await p;
      assert.is(r.stopReason, 'abort');
      await e.resume();
      // A weight update mid-request still completes the request, re-sent from what was kept.
      const q = e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 60 } });
      await whenGenerating(plain)();
      await e.updateWeights({ kind: 'disk', path: writeFakeCheckpoint(dir.path, 1) }, 1);
      const s = await q;
      assert.is(s.stopReason, 'length');
      assert.is(s.outputTokens.length, 60);
      assert.is(s.outputVersions.at(-1), 1);
    });
  } finally {
    await plain.close();
  }
});

test.run();
