import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { StalenessThrottle, stalenessStats } from '../../algorithms/staleness.ts';
import { throwsCode } from './helpers.ts';

const flush = () => new Promise<void>((r) => setImmediate(r));

test('capacity = min(conc − running, (η + v + 1)·B − (accepted + running))', () => {
  const th = new StalenessThrottle({
    consumerBatchSize: 2,
    maxConcurrentRollouts: 4,
    maxHeadOffpolicyness: 0,
  });
  assert.is(th.capacity(), 2);
  assert.ok(th.tryAdmit());
  assert.ok(th.tryAdmit());
  assert.not.ok(th.tryAdmit());
  th.finish(true);
  th.finish(true);
  assert.is(th.capacity(), 0, 'a whole batch was produced for version 0');
  th.setVersion(1);
  assert.is(th.capacity(), 2);
});

test('η lets rollout run η versions ahead, bounded by concurrency', () => {
  const th = new StalenessThrottle({
    consumerBatchSize: 2,
    maxConcurrentRollouts: 3,
    maxHeadOffpolicyness: 2,
  });
  assert.is(th.capacity(), 3);
  let started = 0;
  for (;;) {
    if (!th.tryAdmit()) break;
    started++;
    th.finish(true);
  }
  assert.is(started, 6, '(η + 0 + 1)·B episodes before version 1');
});

test('rejected episodes give their budget back', () => {
  const th = new StalenessThrottle({ consumerBatchSize: 2 });
  th.tryAdmit();
  th.tryAdmit();
  th.finish(false);
  assert.is(th.accepted, 0);
  assert.is(th.capacity(), 1);
  throwsCode(
    () => {
      th.finish(true);
      th.finish(true);
    },
    'SHAPE_MISMATCH',
    'finish',
  );
});

test('admit waits for a version bump or a finished episode, FIFO', async () => {
  const th = new StalenessThrottle({ consumerBatchSize: 1 });
  await th.admit();
  const order: number[] = [];
  const a = th.admit().then(() => order.push(1));
  const b = th.admit().then(() => order.push(2));
  await flush();
  assert.equal(order, []);
  th.finish(true);
  th.setVersion(1);
  await flush();
  assert.equal(order, [1]);
  th.finish(true);
  th.setVersion(2);
  await Promise.all([a, b]);
  assert.equal(order, [1, 2]);
  const ac = new AbortController();
  const c = th.admit(ac.signal);
  ac.abort(new Error('stop'));
  await c.then(
    () => assert.unreachable('aborted admit resolved'),
    (e: Error) => assert.is(e.message, 'stop'),
  );
});

test('restore counts past batches as accepted; dp ranks split the budgets', () => {
  const th = new StalenessThrottle({
    consumerBatchSize: 8,
    maxConcurrentRollouts: 16,
    dpWorldSize: 2,
    maxHeadOffpolicyness: 1,
  });
  assert.is(th.batchSize, 4);
  assert.is(th.maxConcurrent, 8);
  th.restore(5);
  assert.is(th.accepted, 20);
  assert.is(th.capacity(), 8);
  throwsCode(
    () => new StalenessThrottle({ consumerBatchSize: 0 }),
    'INVALID_OPTION',
    '--rollout-batch-size',
  );
  throwsCode(
    () => new StalenessThrottle({ consumerBatchSize: 2, maxHeadOffpolicyness: -1 }),
    'INVALID_OPTION',
    '--max-head-offpolicyness',
  );
});

test('stalenessStats counts generated tokens only', () => {
  const s = stalenessStats(
    [
      { lossMask: [0, 1, 1, 0], versions: [-1, 2, 3, -1] },
      { lossMask: [0, 1], versions: [-1, 4] },
    ],
    4,
  );
  assert.equal(s, { tokens: 3, mean: 1, min: 0, max: 2, histogram: { 0: 1, 1: 1, 2: 1 } });
  assert.equal(stalenessStats([], 3), { tokens: 0, mean: 0, min: 0, max: 0, histogram: {} });
});

test.run();
