import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Trajectory } from '../../algorithms/trajectory.ts';
import { TrajectoryBuffer } from '../../algorithms/trajectory-buffer.ts';
import { rejectsCode, throwsCode } from './helpers.ts';

function traj(id: number, version = 0): Trajectory {
  return {
    inputIds: [1, 2, 3],
    lossMask: [0, 1, 1],
    logprobs: [0, -1, -1],
    versions: [-1, version, version],
    reward: 0,
    groupId: String(id),
    promptIndex: id,
    truncated: false,
  };
}

/** Observes a promise's settlement without awaiting it. */
function track<T>(p: Promise<T>) {
  const t: { settled: boolean; value?: T; error?: unknown } = { settled: false };
  p.then(
    (v) => ((t.settled = true), (t.value = v)),
    (e) => ((t.settled = true), (t.error = e)),
  );
  return t;
}
/** Lets every queued promise callback run (one macrotask turn; not a timed sleep). */
const flush = () => new Promise<void>((r) => setImmediate(r));

/** A producer's step as the async loop runs it: a slot, the batch staged, committed. */
async function commit(buf: TrajectoryBuffer, ...items: Trajectory[]): Promise<void> {
  const slot = await buf.acquire();
  slot.add(...items);
  slot.commit({});
}

test('producers block once queueSize slots are taken; a slot returns when the trainer takes a batch', async () => {
  const buf = new TrajectoryBuffer({ queueSize: 2 });
  const a = await buf.acquire();
  const b = await buf.acquire();
  const third = track(buf.acquire());
  await flush();
  assert.not.ok(third.settled, 'third producer must wait');
  a.add(traj(1));
  a.commit({});
  b.add(traj(2));
  b.commit({});
  await flush();
  assert.not.ok(third.settled, 'committing does not free a slot');
  assert.is(buf.stats().queued, 2);
  const lease = await buf.take();
  await flush();
  assert.ok(third.settled, 'taking a batch returns its slot');
  assert.is(lease!.batch.trajectories[0]!.promptIndex, 1);
  lease!.ack();
  assert.is(buf.stats().freeSlots, 0);
});

test('consumers block on an empty buffer and get batches in commit order', async () => {
  const buf = new TrajectoryBuffer({ queueSize: 3 });
  const waiting = track(buf.take());
  await flush();
  assert.not.ok(waiting.settled);
  for (const id of [1, 2]) {
    const s = await buf.acquire();
    s.add(traj(id));
    s.commit({ step: id });
  }
  await flush();
  assert.equal(waiting.value!.batch.meta, { step: 1 });
  waiting.value!.ack();
  const next = await buf.take();
  assert.is(next!.batch.trajectories[0]!.promptIndex, 2);
});

test('a producer failing mid-batch returns its slot and gets its staged trajectories back; nothing is enqueued', async () => {
  const buf = new TrajectoryBuffer({ queueSize: 1 });
  const s = await buf.acquire();
  s.add(traj(1), traj(2));
  const back = s.abort();
  assert.equal(
    back.map((t) => t.promptIndex),
    [1, 2],
  );
  assert.equal(s.abort(), []);
  throwsCode(() => s.commit({}), 'SHAPE_MISMATCH', 'aborted');
  assert.is(buf.stats().queued, 0);
  assert.is(buf.stats().freeSlots, 1);
  await commit(buf, ...back);
  const lease = await buf.take();
  assert.equal(
    lease!.batch.trajectories.map((t) => t.promptIndex),
    [1, 2],
  );
  lease!.ack();
  const again = await buf.acquire();
  again.add(traj(3));
  assert.equal(
    again.abort().map((t) => t.promptIndex),
    [3],
  );
  assert.equal(buf.stats(), { ...buf.stats(), queued: 0, freeSlots: 1, producing: 0, aborted: 2 });
});

test('an empty commit is a batch (the consumer learns the step yielded nothing); abort returns the slot', async () => {
  const buf = new TrajectoryBuffer<{ step: number }>({ queueSize: 1 });
  (await buf.acquire()).commit({ step: 1 });
  assert.is(buf.stats().queued, 1);
  assert.is(buf.stats().freeSlots, 0);
  const lease = await buf.take();
  assert.equal(lease!.batch.trajectories, []);
  assert.equal(lease!.batch.meta, { step: 1 });
  lease!.ack();
  (await buf.acquire()).abort();
  assert.is(buf.stats().queued, 0);
  assert.is(buf.stats().freeSlots, 1);
});

test('a lease is settled once: a second ack is a bug in the loop', async () => {
  const buf = new TrajectoryBuffer({ queueSize: 2 });
  for (const id of [1, 2]) await commit(buf, traj(id));
  const first = await buf.take();
  assert.is(buf.stats().leased, 1);
  first!.ack();
  throwsCode(() => first!.ack(), 'SHAPE_MISMATCH', 'settled');
  const second = await buf.take();
  assert.is(second!.batch.trajectories[0]!.promptIndex, 2);
  second!.ack();
  assert.equal(buf.stats(), { ...buf.stats(), acked: 2, leased: 0, queued: 0, freeSlots: 2 });
});

test('per-token staleness is measured against the trainer version', async () => {
  const buf = new TrajectoryBuffer({ queueSize: 2 });
  await commit(buf, traj(1, 3), traj(2, 5));
  const lease = await buf.take({ currentVersion: 5 });
  assert.equal(lease!.staleness, { tokens: 4, mean: 1, min: 0, max: 2, histogram: { 0: 2, 2: 2 } });
  lease!.ack();
  assert.is(buf.stats().staleMax, 2);
  assert.is(buf.stats().staleMean, 1);
});

test('close: waiting producers reject, consumers drain then get null; a slot held at close can still commit', async () => {
  const buf = new TrajectoryBuffer({ queueSize: 1 });
  const held = await buf.acquire();
  const blocked = buf.acquire();
  buf.close();
  await rejectsCode(blocked, 'BUFFER_CLOSED');
  await rejectsCode(buf.acquire(), 'BUFFER_CLOSED');
  held.add(traj(7));
  held.commit({});
  const waiting = track(buf.take());
  await flush();
  assert.is(waiting.value!.batch.trajectories[0]!.promptIndex, 7);
  waiting.value!.ack();
  assert.is(await buf.take(), null, 'closed and drained');
});

test('an aborted take leaves later batches for the next consumer', async () => {
  const buf = new TrajectoryBuffer({ queueSize: 1 });
  const ac = new AbortController();
  const t = track(buf.take({ signal: ac.signal }));
  ac.abort(new Error('trainer stopping'));
  await flush();
  assert.ok(t.error instanceof Error);
  await commit(buf, traj(1));
  const lease = await buf.take();
  assert.is(lease!.batch.trajectories[0]!.promptIndex, 1);
  throwsCode(() => new TrajectoryBuffer({ queueSize: 0 }), 'INVALID_OPTION', 'ASYNC_QUEUE_SIZE');
});

test('randomised producers that fail and two consumers: every trajectory is trained on exactly once', async () => {
  let seed = 12345;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const Q = 2;
  const buf = new TrajectoryBuffer({ queueSize: Q });
  const trained: number[] = [];
  let maxInFlight = 0;
  const producer = async (ids: number[]) => {
    const todo = [...ids];
    while (todo.length > 0) {
      const slot = await buf.acquire();
      const batch = todo.splice(0, 3);
      let failed = false;
      for (const id of batch) {
        await Promise.resolve();
        if (rand() < 0.15) {
          failed = true;
          break;
        }
        slot.add(traj(id));
      }
      if (failed) {
        slot.abort();
        todo.unshift(...batch);
      } else slot.commit({});
      const s = buf.stats();
      maxInFlight = Math.max(maxInFlight, s.queued + s.producing);
    }
  };
  const consumer = async () => {
    for (;;) {
      const lease = await buf.take();
      if (!lease) return;
      await Promise.resolve();
      trained.push(...lease.batch.trajectories.map((t) => t.promptIndex as number));
      lease.ack();
    }
  };
  const ids = Array.from({ length: 90 }, (_, i) => i);
  const consumers = [consumer(), consumer()];
  await Promise.all([
    producer(ids.slice(0, 30)),
    producer(ids.slice(30, 60)),
    producer(ids.slice(60)),
  ]);
  buf.close();
  await Promise.all(consumers);
  assert.equal(
    [...trained].sort((a, b) => a - b),
    ids,
  );
  assert.ok(buf.stats().aborted > 0, JSON.stringify(buf.stats()));
  assert.ok(maxInFlight <= Q, `in flight ${maxInFlight}`);
});

test.run();
