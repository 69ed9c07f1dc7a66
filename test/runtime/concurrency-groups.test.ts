import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { actorReady, defineActor, get, init, shutdown } from '../../runtime/index.ts';
import type { Streamer } from '../fixtures/runtime/streamer.ts';
import { fixture, rejection, until } from './helpers.ts';

const StreamerActor = defineActor<typeof Streamer>(fixture('streamer.ts'), 'Streamer');

test.before(async () => {
  await init({ address: 'local', local: { node: { numCpus: 4 } } });
});
test.after(async () => {
  await shutdown();
});

test('a call held in one group never blocks calls of another group', async () => {
  const s = StreamerActor.options({ concurrencyGroups: { io: 2, compute: 1 } }).remote();
  await actorReady(s);
  const held = s.hold.options({ concurrencyGroup: 'compute' }).remote();
  const heldDefault = s.hold.remote(); // the default group (maxConcurrency 1) is full too
  await until(
    () => s.holdsStarted.options({ concurrencyGroup: 'io' }).remote(),
    10_000,
    'holds started',
  );
  // io calls run while compute and default are each full.
  assert.equal(
    await get([
      s.plain.options({ concurrencyGroup: 'io' }).remote(1),
      s.plain.options({ concurrencyGroup: 'io' }).remote(2),
    ]),
    [2, 3],
  );
  assert.is(held.isSettled, false);
  assert.is(heldDefault.isSettled, false);
  // A second compute call waits behind the first (its group allows one at a time).
  const queued = s.plain.options({ concurrencyGroup: 'compute' }).remote(10);
  await s.plain.options({ concurrencyGroup: 'io' }).remote(0);
  assert.is(queued.isSettled, false);
  await s.release.options({ concurrencyGroup: 'io' }).remote();
  assert.equal(await get([held, heldDefault, queued]), ['released', 'released', 11]);
});

test('a group runs at most its limit at once', async () => {
  const s = StreamerActor.options({ concurrencyGroups: { io: 2 } }).remote();
  const io = s.hold.options({ concurrencyGroup: 'io' });
  const refs = [io.remote(), io.remote(), io.remote()];
  await until(async () => (await s.holdsStarted.remote()) === 2, 10_000, 'two holds');
  // A round trip through the default group later, the third has still not started.
  await s.plain.remote(0);
  assert.is(await s.holdsStarted.remote(), 2);
  await s.release.remote();
  assert.equal(await get(refs), ['released', 'released', 'released']);
  assert.is(await s.holdsStarted.remote(), 3);
});

test('a call naming a group the actor lacks fails with InvalidArgumentError', async () => {
  const s = StreamerActor.options({ concurrencyGroups: { io: 1 } }).remote();
  const e = await rejection(s.plain.options({ concurrencyGroup: 'gpu' }).remote(1));
  assert.is(e.code, 'INVALID_ARGUMENT');
  assert.match(e.message, /no concurrency group 'gpu'/);
  assert.is(await s.plain.remote(1), 2);
});

test('group sizes must be whole numbers of at least 1', () => {
  assert.throws(
    () => StreamerActor.options({ concurrencyGroups: { io: 0 } }).remote(),
    /concurrency group 'io'/,
  );
});

test.run();
