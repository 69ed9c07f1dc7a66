/**
 * The remote reward client against a real HTTP service in OpenRLHF's shape: queries that arrive
 * together go in one request, a batch is split across the URLs, retryable failures are sent again
 * (to the next URL), and every failure rejects with a RemoteRewardError that names the URL.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { RemoteRewardClient } from '../../rewards/remote.ts';
import { startRewardServer, type RewardServer } from './fixtures/reward-server.ts';

const servers: RewardServer[] = [];
const serve = async (...a: Parameters<typeof startRewardServer>) => {
  const s = await startRewardServer(...a);
  servers.push(s);
  return s;
};
test.after.each(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

/** Rewards: the query's length; scores: minus that; one extra log per query. */
const byLength = (req: { query: string[] }) => ({
  status: 200,
  body: {
    rewards: req.query.map((q) => q.length),
    scores: req.query.map((q) => -q.length),
    extra_logs: { chars: req.query.map((q) => q.length), model: 'rm-1' },
  },
});

const queries = (n: number) =>
  Array.from({ length: n }, (_, i) => ({
    query: `prompt ${i} answer ${'x'.repeat(i)}`,
    prompt: `prompt ${i}`,
    ...(i % 2 ? { label: `#### ${i}` } : {}),
  }));

test("queries that arrive together go in one request, in OpenRLHF's shape, answered in order", async () => {
  const s = await serve(byLength);
  const rm = new RemoteRewardClient({ urls: [s.url], maxBatch: 8 });
  const qs = queries(5);
  const got = await Promise.all(qs.map((q) => rm.score(q)));
  assert.is(s.requests.length, 1, 'one request');
  assert.equal(s.requests[0], {
    query: qs.map((q) => q.query),
    prompts: qs.map((q) => q.prompt),
    labels: [null, '#### 1', null, '#### 3', null],
  });
  assert.equal(
    got.map((r) => r.reward),
    qs.map((q) => q.query.length),
  );
  assert.equal(got[2], {
    reward: qs[2]!.query.length,
    score: -qs[2]!.query.length,
    extraLogs: { chars: qs[2]!.query.length, model: 'rm-1' },
  });
});

test('a batch is cut at maxBatch and each batch split evenly across the URLs', async () => {
  const a = await serve(byLength);
  const b = await serve(byLength);
  const rm = new RemoteRewardClient({ urls: [a.url, b.url], maxBatch: 4 });
  const qs = queries(6);
  const got = await Promise.all(qs.map((q) => rm.score(q)));
  assert.equal(
    got.map((r) => r.reward),
    qs.map((q) => q.query.length),
  );
  const sizes = [...a.requests, ...b.requests].map((r) => r.query.length).sort();
  assert.equal(sizes, [1, 1, 2, 2], 'batches of 4 and 2, each halved');
  assert.is(a.requests.length, 2);
  assert.is(b.requests.length, 2);
});

test('a 503 and a refused connection are retried on the next URL; the answer still arrives', async () => {
  const flaky = await serve((req, n) =>
    n === 0 ? { status: 503, body: { error: 'warming up' } } : byLength(req),
  );
  const rm = new RemoteRewardClient({ urls: [flaky.url], retries: 2, retryDelayMs: 1 });
  const [q] = queries(1);
  assert.is((await rm.score(q!)).reward, q!.query.length);
  assert.is(flaky.requests.length, 2, 'the 503, then the retry');

  const gone = await serve(byLength);
  const goneUrl = gone.url;
  await gone.close();
  const ok = await serve(byLength);
  const failover = new RemoteRewardClient({ urls: [goneUrl, ok.url], retries: 1, retryDelayMs: 1 });
  assert.is((await failover.score(q!)).reward, q!.query.length);
  assert.is(ok.requests.length, 1, 'the retry went to the next URL');
});

test('failures reject every query of the request with REMOTE_REWARD, naming the URL and cause', async () => {
  const broken = await serve(() => ({ status: 500, body: { error: 'model exploded' } }));
  const rm = new RemoteRewardClient({ urls: [broken.url], retries: 2, retryDelayMs: 1 });
  const errs = await Promise.all(queries(3).map((q) => rm.score(q).catch((e: Error) => e)));
  assert.is(broken.requests.length, 3, 'one request, retried twice');
  for (const e of errs) {
    assert.is((e as { code?: string }).code, 'REMOTE_REWARD');
    assert.match(String((e as Error).message), `${broken.url} failed after 3 tries`);
    assert.match(String((e as Error).message), /model exploded/);
  }

  const hang = await serve(() => 'hang');
  const slow = new RemoteRewardClient({ urls: [hang.url], retries: 0, timeoutMs: 200 });
  const t = await slow.score(queries(1)[0]!).catch((e: Error) => e);
  assert.is((t as { code?: string }).code, 'REMOTE_REWARD');
  assert.is(((t as Error).cause as { code?: string }).code, 'TIMEOUT');

  const short = await serve(() => ({ status: 200, body: { rewards: [1] } }));
  const wrong = new RemoteRewardClient({ urls: [short.url], retries: 3, retryDelayMs: 1 });
  const p = await Promise.all(queries(2).map((q) => wrong.score(q).catch((e: Error) => e)));
  assert.match(String((p[0] as Error).message), /'rewards' is not a list of 2/);
  assert.is(short.requests.length, 1, 'an answer in the wrong shape is not retried');
});

test.run();
