import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  ObjectRef,
  ObjectRefGenerator,
  defineActor,
  defineTask,
  get,
  init,
  kill,
  shutdown,
} from '../../runtime/index.ts';
import type { Streamer } from '../fixtures/runtime/streamer.ts';
import type { countTask } from '../fixtures/runtime/tasks.ts';
import { fixture, rejection, until } from './helpers.ts';

const StreamerActor = defineActor<typeof Streamer>(fixture('streamer.ts'), 'Streamer');
const countStream = defineTask<typeof countTask>(fixture('tasks.ts'), 'countTask');

/**
 * Every ref of a stream, taken with `next()`: TypeScript types the element of any `for await` as
 * the awaited type (so there `ref` is typed as the item, while it is an `ObjectRef` at runtime).
 */
async function refsOf<T>(gen: ObjectRefGenerator<T>): Promise<ObjectRef<T>[]> {
  const out: ObjectRef<T>[] = [];
  for (let i = 0; i < 1000; i++) {
    const r = await gen.next();
    if (r.done) return out;
    out.push(r.value);
  }
  throw new Error('stream did not end');
}

test.before(async () => {
  await init({ address: 'local', local: { node: { numCpus: 4 } } });
});
test.after(async () => {
  await shutdown();
});

test('a streaming call yields one ref per item, in order', async () => {
  const s = StreamerActor.remote();
  const gen = s.count.options({ numReturns: 'streaming' }).remote(5);
  assert.ok(gen instanceof ObjectRefGenerator);
  const out: number[] = [];
  for await (const ref of gen) {
    assert.ok(ref instanceof ObjectRef);
    out.push(await get(ref));
  }
  assert.equal(out, [0, 1, 2, 3, 4]);
  // The actor serves plain calls after the stream.
  assert.is(await s.plain.remote(1), 2);
});

test('a synchronous generator streams too', async () => {
  const s = StreamerActor.remote();
  const refs = await refsOf(s.letters.options({ numReturns: 'streaming' }).remote('abc'));
  assert.equal(await get(refs), ['a', 'b', 'c']);
});

test('an empty stream ends at once', async () => {
  const s = StreamerActor.remote();
  assert.equal(await refsOf(s.count.options({ numReturns: 'streaming' }).remote(0)), []);
});

test('large items arrive whole and in order (they take the bulk link)', async () => {
  const s = StreamerActor.remote();
  const out: number[] = [];
  for (const ref of await refsOf(s.big.options({ numReturns: 'streaming' }).remote(4, 1 << 19))) {
    const a = await get(ref);
    assert.is(a.length, 1 << 19);
    out.push(a[0]!, a[a.length - 1]!);
  }
  assert.equal(out, [0, 0, 1, 1, 2, 2, 3, 3]);
});

test('an error the generator throws fails the item where it threw, then the stream ends', async () => {
  const s = StreamerActor.remote();
  const refs = await refsOf(s.failAt.options({ numReturns: 'streaming' }).remote(2));
  assert.is(refs.length, 3);
  assert.equal(await get(refs.slice(0, 2)), [0, 1]);
  const e = await rejection(refs[2]!);
  assert.is(e.code, 'TASK');
  assert.is(e.remoteName, 'RangeError');
  assert.match(e.message, /no item 2/);
  assert.is(e.context?.method, 'failAt');
});

test('a method that is not a generator fails the stream with InvalidArgumentError', async () => {
  const s = StreamerActor.remote();
  // The type system refuses this (see handles.type-test.ts); the runtime says why too.
  const gen = (
    s.plain as unknown as {
      options(o: object): { remote(x: number): ObjectRefGenerator<number> };
    }
  )
    .options({ numReturns: 'streaming' })
    .remote(1);
  const first = await gen.next();
  assert.is(first.done, false);
  const e = await rejection(first.value!);
  assert.is(e.code, 'INVALID_ARGUMENT');
  assert.match(e.message, /not return a generator/);
  assert.is((await gen.next()).done, true);
});

test('backpressure: the generator waits while generatorBackpressure items are unconsumed', async () => {
  const s = StreamerActor.options({ concurrencyGroups: { ctl: 1 } }).remote();
  const gen = s.count.options({ numReturns: 'streaming', generatorBackpressure: 2 }).remote(10);
  const ctl = s.producedSoFar.options({ concurrencyGroup: 'ctl' });
  // Nothing consumed: the generator stops at 2 items and stays there.
  await until(async () => (await ctl.remote()) === 2, 10_000, 'two items produced');
  const first = await gen.next();
  assert.is(await first.value!, 0);
  // Stays bounded while the consumer is slow: produced - consumed never exceeds the window.
  for (let i = 1; i < 10; i++) {
    const r = await gen.next();
    assert.is(await r.value!, i);
    const produced = await ctl.remote();
    assert.ok(produced - (i + 1) <= 2, `produced ${produced} with ${i + 1} consumed`);
  }
  assert.is((await gen.next()).done, true);
});

test('actor death mid-stream fails the next item with ActorDiedError', async () => {
  const s = StreamerActor.remote();
  const gen = s.stall.options({ numReturns: 'streaming' }).remote(2);
  const a = await gen.next();
  const b = await gen.next();
  assert.equal(await get([a.value!, b.value!]), [0, 1]);
  const next = gen.next();
  await kill(s);
  const r = await next;
  assert.is(r.done, false);
  const e = await rejection(r.value!);
  assert.is(e.code, 'ACTOR_DIED');
  assert.is((await gen.next()).done, true);
});

test('leaving a stream early closes the generator on the worker', async () => {
  const s = StreamerActor.options({ concurrencyGroups: { ctl: 1 } }).remote();
  const gen = s.stall.options({ numReturns: 'streaming' }).remote(3);
  for await (const item of gen) {
    // At runtime a ref (see refsOf); awaiting it gives the item.
    assert.ok((item as unknown) instanceof ObjectRef);
    assert.is(await (item as unknown as ObjectRef<number>), 0);
    break;
  }
  assert.is((await gen.next()).done, true);
  await until(
    () => s.wasAborted.options({ concurrencyGroup: 'ctl' }).remote(),
    10_000,
    'the generator saw its signal abort',
  );
});

test('a generator task streams from the task pool', async () => {
  const refs = await refsOf(countStream.options({ numReturns: 'streaming' }).remote(3));
  assert.equal(await get(refs), [0, 10, 20]);
});

test.run();
