import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { isEngineError } from '../../engines/http/errors.ts';
import { httpCall } from '../../engines/http/http-call.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import {
  prompt,
  tempDir,
  testGenerator,
  whenGenerating,
  writeFakeCheckpoint,
} from './fake-fixtures.ts';

const gen = testGenerator(1);
let fake: FakeSglangServer;
let engine: SglangEngine;
const dir = tempDir();

test.before(async () => {
  fake = await FakeSglangServer.start({ generator: gen, modelPath: dir.path });
  engine = new SglangEngine({ urls: [fake.url], retryBaseDelayMs: 5, healthIntervalMs: 200 });
});
test.after(async () => {
  await engine.close();
  await fake.close();
  dir.cleanup();
});

function lastBody(): Record<string, unknown> {
  return fake.generateBodies.at(-1) as Record<string, unknown>;
}

function temperedLogprob(context: number[], token: number, temperature: number): number {
  const l = gen.logits(context);
  const scaled = Array.from(l, (x) => x / temperature);
  const m = Math.max(...scaled);
  return scaled[token]! - (m + Math.log(scaled.reduce((a, x) => a + Math.exp(x - m), 0)));
}

test('maps the generation config onto /generate field by field', async () => {
  await engine.generate({
    inputIds: prompt,
    gconfig: {
      maxNewTokens: 7,
      minNewTokens: 2,
      temperature: 0.7,
      topP: 0.9,
      topK: 5,
      stopTokenIds: [3],
      stop: ['zz'],
      seed: 9,
    },
  });
  assert.equal(lastBody(), {
    input_ids: prompt,
    sampling_params: {
      max_new_tokens: 7,
      min_new_tokens: 2,
      temperature: 0.7,
      top_p: 0.9,
      top_k: 5,
      stop_token_ids: [3],
      ignore_eos: false,
      stop: ['zz'],
      sampling_seed: 9,
    },
    return_logprob: true,
    stream: false,
  });
  await engine.generate({ inputIds: prompt, gconfig: { maxNewTokens: 3, greedy: true } });
  const sp = lastBody().sampling_params as Record<string, unknown>;
  assert.is(sp.temperature, 0);
  assert.is(sp.top_k, -1);
});

test('logprobs are those of the tempered distribution, read from output_token_logprobs', async () => {
  const r = await engine.generate({
    inputIds: prompt,
    gconfig: { maxNewTokens: 6, temperature: 0.6 },
  });
  const ctx = prompt.slice();
  r.outputTokens.forEach((t, i) => {
    assert.ok(Math.abs(r.outputLogprobs[i]! - temperedLogprob(ctx, t, 0.6)) < 1e-9);
    ctx.push(t);
  });
});

test('generateN sends one request with n and reads the JSON array', async () => {
  const before = fake.stats.generateRequests;
  const rs = await engine.generateN({ inputIds: prompt, gconfig: { maxNewTokens: 5, n: 3 } });
  assert.is(rs.length, 3);
  assert.is(fake.stats.generateRequests - before, 1);
  assert.is((lastBody().sampling_params as Record<string, unknown>).n, 3);
});

test('a request the server aborts (pause_generation by someone else) continues from its partial output', async () => {
  const before = fake.stats.generateRequests;
  const p = engine.generate({ inputIds: prompt, gconfig: { maxNewTokens: 120 } });
  await whenGenerating(fake)();
  await httpCall(`${fake.url}/pause_generation`, { mode: 'abort' }, { timeoutMs: 5000 });
  await fake.waitFor(() => fake.stats.generateRequests - before >= 2); // the re-send, held while paused
  await httpCall(`${fake.url}/continue_generation`, {}, { timeoutMs: 5000 });
  const r = await p;
  assert.is(r.stopReason, 'length');
  assert.is(r.outputTokens.length, 120);
  const [first, second] = fake.generateBodies.slice(-2) as Array<{
    input_ids: number[];
    sampling_params: { max_new_tokens: number };
  }>;
  assert.is(first!.input_ids.length, prompt.length);
  const partial = second!.input_ids.length - prompt.length;
  assert.ok(partial > 0 && partial < 120);
  assert.equal(second!.input_ids, prompt.concat(r.outputTokens.slice(0, partial)));
  assert.is(second!.sampling_params.max_new_tokens, 120 - partial);
});

test('5xx answers are retried with backoff; past maxRetries the error has code and status', async () => {
  fake.failNextGenerates = 2;
  const r = await engine.generate({ inputIds: prompt, gconfig: { maxNewTokens: 3 } });
  assert.is(r.outputTokens.length, 3);
  const strict = new SglangEngine({ urls: [fake.url], maxRetries: 0 });
  fake.failNextGenerates = 1;
  const err = await strict
    .generate({ inputIds: prompt, gconfig: { maxNewTokens: 3 } })
    .catch((e: unknown) => e);
  await strict.close();
  assert.ok(isEngineError(err));
  assert.is(err.code, 'HTTP_STATUS');
  assert.is(err.status, 503);
});

test('a slow answer past requestTimeoutMs fails with code timeout', async () => {
  const impatient = new SglangEngine({
    urls: [fake.url],
    requestTimeoutMs: 80,
    maxRetries: 0,
    healthFailureThreshold: 100,
  });
  fake.responseDelayMs = 400;
  const err = await impatient
    .generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } })
    .catch((e: unknown) => e);
  fake.responseDelayMs = 0;
  await impatient.close();
  assert.ok(isEngineError(err));
  assert.is(err.code, 'TIMEOUT');
});

test('a 4xx answer is not retried', async () => {
  const before = fake.stats.generateRequests;
  const err = await engine
    .generate({ inputIds: Array(5000).fill(2), gconfig: { maxNewTokens: 2 } })
    .catch((e: unknown) => e);
  assert.ok(isEngineError(err));
  assert.is(err.status, 400);
  assert.is(fake.stats.generateRequests - before, 1);
});

test('with SGLANG_RETURN_ORIGINAL_LOGPROB the engine refuses temperatures other than 1', async () => {
  const raw = new SglangEngine({ urls: [fake.url], returnOriginalLogprob: true });
  const err = await raw
    .generate({ inputIds: prompt, gconfig: { temperature: 0.7 } })
    .catch((e: unknown) => e);
  assert.ok(isEngineError(err));
  assert.is(err.code, 'CONFIG');
  assert.is(
    (await raw.generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } })).outputTokens.length,
    2,
  );
  await raw.close();
});

test('updateWeights calls update_weights_from_disk with the version; a failed load keeps the old version', async () => {
  const path = writeFakeCheckpoint(dir.path, 4);
  await engine.updateWeights({ kind: 'disk', path }, 4);
  assert.is(fake.weightVersion, '4');
  assert.is(engine.getVersion(), 4);
  const err = await engine
    .updateWeights({ kind: 'disk', path: `${dir.path}/missing` }, 5)
    .catch((e: unknown) => e);
  assert.ok(isEngineError(err));
  assert.is(engine.getVersion(), 4);
  assert.is(
    (await engine.generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } })).outputVersions[0],
    4,
  );
  const unsupported = await engine
    .updateWeights({ kind: 'tensors', tensors: {} }, 6)
    .catch((e: unknown) => e);
  assert.ok(isEngineError(unsupported) && unsupported.code === 'UNSUPPORTED');
});

test('sleep releases memory; requests wait for wakeUp', async () => {
  await engine.sleep();
  const held = engine.generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } });
  const first = await Promise.race([
    held.then(() => 'finished'),
    new Promise((r) => setTimeout(r, 100, 'held')),
  ]);
  assert.is(first, 'held');
  await engine.wakeUp();
  assert.is((await held).outputTokens.length, 2);
});

test.run();
