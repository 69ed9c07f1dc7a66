import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { isEngineError } from '../../engines/http/errors.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
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

async function twoServers(tokenDelayMs = 1): Promise<[FakeSglangServer, FakeSglangServer]> {
  return [
    own(await FakeSglangServer.start({ generator: testGenerator(tokenDelayMs) })),
    own(await FakeSglangServer.start({ generator: testGenerator(tokenDelayMs) })),
  ];
}

test('requests without a rid spread across servers by load', async () => {
  const [a, b] = await twoServers(2);
  const engine = own(new SglangEngine({ urls: [a.url, b.url] }));
  await Promise.all(
    Array.from({ length: 8 }, () =>
      engine.generate({ inputIds: prompt, gconfig: { maxNewTokens: 10 } }),
    ),
  );
  assert.is(a.stats.generateRequests, 4);
  assert.is(b.stats.generateRequests, 4);
});

test("an episode's turns (same rid) stay on one server and reuse its prefix cache", async () => {
  const [a, b] = await twoServers(0);
  const engine = own(new SglangEngine({ urls: [a.url, b.url] }));
  let ids = prompt.slice();
  for (let turn = 0; turn < 5; turn++) {
    await engine.generate({ rid: 'other', inputIds: [7, 7, 7], gconfig: { maxNewTokens: 2 } });
    const r = await engine.generate({
      rid: 'episode-1',
      inputIds: ids,
      gconfig: { maxNewTokens: 4 },
    });
    ids = ids.concat(r.outputTokens, [3, 4]);
  }
  const counts = [a.stats.generateRequests, b.stats.generateRequests].sort();
  assert.equal(counts, [5, 5]);
});

test('a server that dies mid-request is marked down, the job is told, and the request finishes elsewhere', async () => {
  const [a, b] = await twoServers(2);
  const engine = own(
    new SglangEngine({
      urls: [a.url, b.url],
      healthIntervalMs: 50,
      healthTimeoutMs: 200,
      retryBaseDelayMs: 5,
    }),
  );
  const p = engine.generate({ rid: 'ep', inputIds: prompt, gconfig: { maxNewTokens: 100 } });
  const first = await Promise.race([
    whenGenerating(a)().then(() => a),
    whenGenerating(b)().then(() => b),
  ]);
  const survivor = first === a ? b : a;
  const down = nextEvent(engine, 'server-down');
  await first.close();
  const r = await p;
  assert.is(r.stopReason, 'length');
  assert.is(r.outputTokens.length, 100);
  assert.is((await down).url, first.url);
  assert.ok(survivor.stats.generateRequests >= 1);
  const states = Object.fromEntries(engine.servers().map((s) => [s.url, s.state]));
  assert.is(states[first.url], 'down');
  assert.is(states[survivor.url], 'up');
});

test('failing health checks take a server out; on recovery it gets the current weights before serving', async () => {
  const [a, b] = await twoServers(0);
  const engine = own(
    new SglangEngine({ urls: [a.url, b.url], healthIntervalMs: 40, healthTimeoutMs: 200 }),
  );
  a.healthMode = 'fail';
  assert.is((await nextEvent(engine, 'server-down')).url, a.url);
  await engine.updateWeights({ kind: 'disk', path: writeFakeCheckpoint(dir.path, 3) }, 3);
  assert.is(b.weightVersion, '3');
  assert.is(a.weightVersion, 'default');
  const before = a.stats.generateRequests;
  await Promise.all(
    Array.from({ length: 4 }, () =>
      engine.generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } }),
    ),
  );
  assert.is(a.stats.generateRequests, before);
  a.healthMode = 'ok';
  assert.is((await nextEvent(engine, 'server-up')).url, a.url);
  assert.is(a.weightVersion, '3');
});

test('a hanging health check counts as a failure', async () => {
  const [a, b] = await twoServers(0);
  const engine = own(
    new SglangEngine({ urls: [a.url, b.url], healthIntervalMs: 40, healthTimeoutMs: 60 }),
  );
  b.healthMode = 'hang';
  assert.is((await nextEvent(engine, 'server-down')).url, b.url);
});

test('with every server down a request fails with NO_SERVER after noServerWaitMs', async () => {
  const a = await FakeSglangServer.start({ generator: testGenerator(0) });
  const url = a.url;
  await a.close();
  const engine = own(
    new SglangEngine({
      urls: [url],
      healthIntervalMs: 30,
      healthTimeoutMs: 100,
      noServerWaitMs: 300,
      retryBaseDelayMs: 5,
      maxRetries: 5,
    }),
  );
  const started = Date.now();
  const err = await engine
    .generate({ inputIds: prompt, gconfig: { maxNewTokens: 2 } })
    .catch((e: unknown) => e);
  assert.ok(isEngineError(err));
  assert.ok(['NO_SERVER', 'NETWORK'].includes(err.code), err.code);
  assert.ok(Date.now() - started < 5000);
});

test.run();
