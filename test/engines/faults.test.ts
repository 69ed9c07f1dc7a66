import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { isEngineError } from '../../engines/http/errors.ts';
import { parseRetryAfter } from '../../engines/http/http-call.ts';
import type { RemoteEngine } from '../../engines/http/remote-engine.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import { VllmEngine } from '../../engines/vllm/index.ts';
import type { FakeServer } from '../fakes/fake-server.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import {
  closedAfterEach,
  nextEvent,
  prompt,
  tempDir,
  testGenerator,
  whenGenerating,
  writeFakeCheckpoint,
} from './fake-fixtures.ts';

const dir = tempDir();
test.after(() => dir.cleanup());

const own = closedAfterEach(test);

async function sglang(tokenDelayMs = 0): Promise<FakeSglangServer> {
  return own(
    await FakeSglangServer.start({ generator: testGenerator(tokenDelayMs), modelPath: dir.path }),
  );
}

async function vllm(): Promise<FakeVllmServer> {
  return own(await FakeVllmServer.start({ generator: testGenerator(0), modelPath: dir.path }));
}

const engine = <E extends RemoteEngine>(e: E): E => own(e);

const small = { inputIds: prompt, gconfig: { maxNewTokens: 3 } };

test('Retry-After reads as delay-seconds or an HTTP date', () => {
  assert.is(parseRetryAfter('2'), 2000);
  assert.is(parseRetryAfter(' 0 '), 0);
  const now = Date.parse('Sun, 22 Nov 2026 12:00:00 GMT');
  assert.is(parseRetryAfter('Sun, 22 Nov 2026 12:00:03 GMT', now), 3000);
  assert.is(parseRetryAfter('Sun, 22 Nov 2026 11:00:00 GMT', now), 0);
  assert.is(parseRetryAfter('soon'), undefined);
  assert.is(parseRetryAfter(undefined), undefined);
});

test('a 429 with Retry-After is retried no sooner than the server asked', async () => {
  const fake = await sglang();
  const e = engine(new SglangEngine({ urls: [fake.url], retryBaseDelayMs: 1, retryMaxDelayMs: 5 }));
  fake.injectFault('/generate', { kind: 'status', status: 429, retryAfter: '1' });
  const started = Date.now();
  const r = await e.generate(small);
  assert.ok(Date.now() - started >= 950, `retried after ${Date.now() - started} ms`);
  assert.is(r.outputTokens.length, 3);
  assert.is(fake.stats.faults, 1);
  assert.is(e.servers()[0]!.state, 'up');
});

test('a Retry-After longer than retryAfterMaxMs waits only that long; the final error carries it', async () => {
  const fake = await vllm();
  const e = engine(
    new VllmEngine({ urls: [fake.url], retryBaseDelayMs: 1, retryAfterMaxMs: 20, maxRetries: 1 }),
  );
  fake.injectFault('/v1/completions', { kind: 'status', status: 503, retryAfter: '3600' }, 2);
  const started = Date.now();
  const err = await e.generate(small).catch((x: unknown) => x);
  assert.ok(Date.now() - started < 3000);
  assert.ok(isEngineError(err));
  assert.is(err.code, 'HTTP_STATUS');
  assert.is(err.status, 503);
  assert.is(err.retryAfterMs, 3_600_000);
  assert.match(err.message, /answered 503: injected failure/);
});

test('close() ends a request waiting out a Retry-After at once', async () => {
  const fake = await sglang();
  const e = new SglangEngine({ urls: [fake.url], retryBaseDelayMs: 1 });
  fake.injectFault('/generate', { kind: 'status', status: 429, retryAfter: '60' });
  const p = e.generate(small).catch((x: unknown) => x);
  await fake.waitFor(() => fake.stats.faults === 1);
  const started = Date.now();
  await e.close();
  const err = await p;
  assert.ok(Date.now() - started < 2000);
  assert.ok(isEngineError(err));
  assert.is(err.code, 'CLOSED');
});

for (const [name, start, path] of [
  ['SGLang', () => sglang(), '/generate'],
  ['vLLM', () => vllm(), '/v1/completions'],
] as const) {
  test(`${name}: a connection reset mid-answer is retried, and without retries is a network error`, async () => {
    const fake: FakeServer = await start();
    const urls = [fake.url];
    const e = engine(
      name === 'SGLang'
        ? new SglangEngine({ urls, retryBaseDelayMs: 1 })
        : new VllmEngine({ urls, retryBaseDelayMs: 1 }),
    );
    fake.injectFault(path, { kind: 'reset' });
    assert.is((await e.generate(small)).outputTokens.length, 3);
    assert.is(fake.stats.faults, 1);

    const strict = engine(
      name === 'SGLang'
        ? new SglangEngine({ urls, maxRetries: 0 })
        : new VllmEngine({ urls, maxRetries: 0 }),
    );
    fake.injectFault(path, { kind: 'reset' });
    const err = await strict.generate(small).catch((x: unknown) => x);
    assert.ok(isEngineError(err));
    assert.is(err.code, 'NETWORK');
    assert.match(err.message, /connection closed after \d+ bytes of a 200 answer/);
  });

  test(`${name}: a 200 answer that is not JSON fails at once with a protocol error quoting it`, async () => {
    const fake: FakeServer = await start();
    const urls = [fake.url];
    const e = engine(
      name === 'SGLang'
        ? new SglangEngine({ urls, retryBaseDelayMs: 1 })
        : new VllmEngine({ urls, retryBaseDelayMs: 1 }),
    );
    fake.injectFault(path, { kind: 'malformed' });
    const err = await e.generate(small).catch((x: unknown) => x);
    assert.ok(isEngineError(err));
    assert.is(err.code, 'PROTOCOL');
    assert.not.ok(err.retryable);
    assert.match(err.message, /not JSON: "\{\\"text\\":\\"the answer was cut off/);
    assert.is(fake.stats.faults, 1);
    assert.is(fake.stats.generateRequests, 0);
  });
}

test('a slow answer from a healthy server is waited for: not retried, not marked down', async () => {
  const fake = await sglang();
  const e = engine(
    new SglangEngine({ urls: [fake.url], healthIntervalMs: 20, healthTimeoutMs: 100 }),
  );
  fake.responseDelayMs = 400;
  const r = await e.generate(small);
  assert.is(r.outputTokens.length, 3);
  assert.is(fake.stats.generateRequests, 1);
  assert.ok(fake.stats.healthChecks >= 3, `${fake.stats.healthChecks} health checks`);
  assert.is(e.servers()[0]!.state, 'up');
});

test('a server that stops answering (generation and health) loses its request to another server', async () => {
  const a = await sglang();
  const b = await sglang();
  const e = engine(
    new SglangEngine({
      urls: [a.url, b.url],
      healthIntervalMs: 30,
      healthTimeoutMs: 60,
      retryBaseDelayMs: 1,
    }),
  );
  a.injectFault('/generate', { kind: 'hang' });
  a.healthMode = 'hang';
  const down = nextEvent(e, 'server-down');
  const r = await e.generate({ rid: 'ep', ...small });
  assert.is(r.outputTokens.length, 3);
  assert.is((await down).url, a.url);
  assert.is(a.stats.faults, 1);
  assert.is(b.stats.generateRequests, 1);
});

test('with its only server hung, a request fails within the health and no-server limits', async () => {
  const fake = await sglang();
  const e = engine(
    new SglangEngine({
      urls: [fake.url],
      healthIntervalMs: 30,
      healthTimeoutMs: 60,
      noServerWaitMs: 200,
      retryBaseDelayMs: 1,
    }),
  );
  fake.injectFault('/generate', { kind: 'hang' });
  fake.healthMode = 'hang';
  const started = Date.now();
  const err = await e.generate(small).catch((x: unknown) => x);
  assert.ok(isEngineError(err));
  assert.ok(['SERVER_DOWN', 'NO_SERVER'].includes(err.code), err.code);
  assert.ok(err.retryable);
  assert.ok(Date.now() - started < 5000);
});

test('SGLang: the only server dies during a weight update: a clear error, the old version kept, no hang', async () => {
  const fake = await sglang();
  const e = engine(
    new SglangEngine({ urls: [fake.url], healthIntervalMs: 50, healthTimeoutMs: 100 }),
  );
  fake.injectFault('/update_weights_from_disk', { kind: 'die' });
  const err = await e
    .updateWeights({ kind: 'disk', path: writeFakeCheckpoint(dir.path, 2) }, 2)
    .catch((x: unknown) => x);
  assert.ok(isEngineError(err));
  assert.is(err.code, 'NETWORK');
  assert.match(
    err.message,
    /weight update to version 2 failed on every server \(the servers keep version 0\): POST http:\/\/127\.0\.0\.1:\d+\/update_weights_from_disk/,
  );
  assert.is(e.getVersion(), 0);
});

test('SGLang: a server that dies during a weight update is taken out; the others serve the new version', async () => {
  const a = await sglang(1);
  const b = await sglang(1);
  const e = engine(
    new SglangEngine({
      urls: [a.url, b.url],
      healthIntervalMs: 50,
      healthTimeoutMs: 100,
      retryBaseDelayMs: 1,
    }),
  );
  const inFlight = e.generate({ inputIds: prompt, gconfig: { maxNewTokens: 60 } });
  await Promise.race([whenGenerating(a)(), whenGenerating(b)()]);
  a.injectFault('/update_weights_from_disk', { kind: 'die' });
  const down = nextEvent(e, 'server-down');
  await e.updateWeights({ kind: 'disk', path: writeFakeCheckpoint(dir.path, 3) }, 3);
  assert.is((await down).url, a.url);
  assert.is(e.getVersion(), 3);
  assert.is(b.weightVersion, '3');
  const r = await inFlight;
  assert.is(r.outputTokens.length, 60);
  assert.is(r.outputVersions.at(-1), 3);
  const after = await e.generate(small);
  assert.equal(after.outputVersions, [3, 3, 3]);
});

test('a server that hangs during a weight update is let go once its health fails, and rejoins reloaded and unpaused', async () => {
  const a = await sglang();
  const b = await sglang();
  const e = engine(
    new SglangEngine({ urls: [a.url, b.url], healthIntervalMs: 30, healthTimeoutMs: 60 }),
  );
  a.injectFault('/update_weights_from_disk', { kind: 'hang' });
  const started = Date.now();
  const update = e.updateWeights({ kind: 'disk', path: writeFakeCheckpoint(dir.path, 4) }, 4);
  await a.waitFor(() => a.stats.faults === 1);
  a.healthMode = 'hang';
  await update;
  assert.ok(Date.now() - started < 5000);
  assert.is(e.getVersion(), 4);
  assert.is(b.weightVersion, '4');
  assert.equal(
    e.servers().map((s) => s.state),
    ['down', 'up'],
  );
  const up = nextEvent(e, 'server-up');
  a.healthMode = 'ok';
  assert.is((await up).url, a.url);
  assert.is(a.weightVersion, '4');
  const rs = await Promise.all(Array.from({ length: 4 }, () => e.generate(small)));
  assert.ok(a.stats.generateRequests >= 1);
  assert.equal(
    rs.map((r) => r.outputVersions),
    Array(4).fill([4, 4, 4]),
  );
});

test('vLLM: a server that dies in the middle of the sleep-reload sequence fails the update clearly', async () => {
  const fake = await vllm();
  const e = engine(
    new VllmEngine({
      urls: [fake.url],
      servedModelPath: dir.path,
      healthIntervalMs: 50,
      healthTimeoutMs: 100,
    }),
  );
  fake.injectFault('/collective_rpc', { kind: 'die' });
  const err = await e.updateWeights({ kind: 'disk', path: dir.path }, 1).catch((x: unknown) => x);
  assert.ok(isEngineError(err));
  assert.is(err.code, 'NETWORK');
  assert.match(err.message, /\/collective_rpc/);
  assert.is(e.getVersion(), 0);
});

test('vLLM: a reload that fails after sleep level 2 takes the server out until an update succeeds', async () => {
  const fake = await vllm();
  const e = engine(
    new VllmEngine({
      urls: [fake.url],
      servedModelPath: dir.path,
      healthIntervalMs: 30,
      healthTimeoutMs: 100,
      noServerWaitMs: 100,
    }),
  );
  writeFakeCheckpoint(dir.path, 1);
  fake.injectFault('/collective_rpc', { kind: 'status', status: 500 });
  const err = await e.updateWeights({ kind: 'disk', path: dir.path }, 1).catch((x: unknown) => x);
  assert.ok(isEngineError(err));
  assert.match(err.message, /may have lost their weights/);
  assert.ok(fake.hasDiscardedWeights);
  assert.is(e.servers()[0]!.state, 'down');
  // Healthy again, but with no weights to serve: it stays out rather than generate from nothing.
  const probes = fake.stats.healthChecks;
  await fake.waitFor(() => fake.stats.healthChecks >= probes + 3);
  assert.is(e.servers()[0]!.state, 'down');
  const refused = await e.generate(small).catch((x: unknown) => x);
  assert.ok(isEngineError(refused) && refused.code === 'NO_SERVER');

  const up = nextEvent(e, 'server-up');
  await e.updateWeights({ kind: 'disk', path: dir.path }, 2);
  await up;
  assert.not.ok(fake.hasDiscardedWeights);
  assert.equal((await e.generate(small)).outputVersions, [2, 2, 2]);
});

test('a server that dies while the engine is paused is taken out at resume; requests go to the others', async () => {
  const a = await sglang();
  const b = await sglang();
  const e = engine(new SglangEngine({ urls: [a.url, b.url], retryBaseDelayMs: 1 }));
  await e.pause({ mode: 'abort' });
  await a.close();
  const down = nextEvent(e, 'server-down');
  await e.resume();
  assert.is((await down).url, a.url);
  const rs = await Promise.all(Array.from({ length: 3 }, () => e.generate(small)));
  assert.ok(rs.every((r) => r.outputTokens.length === 3));
  assert.is(b.stats.generateRequests, 3);
});

test('with its only server dead, resume throws, and requests fail with no-server instead of waiting forever', async () => {
  const fake = await sglang();
  const e = engine(
    new SglangEngine({
      urls: [fake.url],
      healthIntervalMs: 30,
      healthTimeoutMs: 60,
      noServerWaitMs: 150,
    }),
  );
  await e.pause({ mode: 'abort' });
  await fake.close();
  const err = await e.resume().catch((x: unknown) => x);
  assert.ok(isEngineError(err) && err.code === 'NETWORK', String(err));
  const refused = await e.generate(small).catch((x: unknown) => x);
  assert.ok(isEngineError(refused) && refused.code === 'NO_SERVER', String(refused));
});

test('a server that dies while the engine sleeps is taken out at wakeUp; the others serve', async () => {
  const a = await sglang();
  const b = await sglang();
  const e = engine(new SglangEngine({ urls: [a.url, b.url], retryBaseDelayMs: 1 }));
  await e.sleep();
  await a.close();
  await e.wakeUp();
  assert.equal(
    e.servers().map((s) => s.state),
    ['down', 'up'],
  );
  assert.is((await e.generate(small)).outputTokens.length, 3);
});

test('a server that refuses to sleep (no memory saver) fails sleep() with its answer', async () => {
  const fake = own(
    await FakeSglangServer.start({ generator: testGenerator(0), enableMemorySaver: false }),
  );
  const e = engine(new SglangEngine({ urls: [fake.url] }));
  const err = await e.sleep().catch((x: unknown) => x);
  assert.ok(isEngineError(err));
  assert.is(err.status, 400);
  assert.match(err.message, /--enable-memory-saver/);
  assert.is(e.servers()[0]!.state, 'up');
});

test.run();
