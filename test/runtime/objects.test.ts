import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  defineActor,
  get,
  init,
  kill,
  put,
  release,
  shutdown,
  wait,
  type ObjectRef,
} from '../../runtime/index.ts';
import { currentRuntime } from '../../runtime/client/runtime.ts';
import type { Caller } from '../fixtures/runtime/caller.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { fixture, rejection, until } from './helpers.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');
const CallerActor = defineActor<typeof Caller>(fixture('caller.ts'), 'Caller');
const store = () => currentRuntime()!.objects;

test.before(async () => {
  await init({ address: 'local', local: { node: { numCpus: 2 } }, objectTransferHoldMs: 200 });
});
test.after(async () => {
  await shutdown();
});

test('put stores in the owner; get works locally and from another process', async () => {
  const data = new Float32Array(1000).fill(0.5);
  const ref = put(data);
  assert.ok(store().has(ref.id));
  assert.is(await get(ref), data, 'the owner reads its own value without a copy');
  const c = CounterActor.remote(0);
  assert.is(await c.sum.remote(ref), 500);
});

test('a 64 MiB value moves in chunks without holding up other calls', async () => {
  const c = CounterActor.options({ maxConcurrency: 4 }).remote(0);
  await c.get.remote();
  const order: string[] = [];
  const big = c.makeArray.remote(16 << 20).then((a) => {
    order.push('big');
    return a;
  });
  const small = c.get.remote().then(() => order.push('small'));
  const [arr] = await Promise.all([big, small]);
  assert.is(arr.length, 16 << 20);
  assert.is(arr[12_345_678], 12_345_678);
  assert.equal(order, ['small', 'big']);
  // And the other way: a 64 MiB put fetched by the actor.
  const ref = put(arr);
  assert.is(await c.sum.remote(ref), ((16 << 20) * ((16 << 20) - 1)) / 2);
});

test('refs owned by an actor are fetched from it; they die with their owner', async () => {
  const caller = CallerActor.remote();
  const box = await caller.makeBoxedRef.remote(3);
  assert.equal(await box.ref, [0, 1, 2]);
  const box2 = await caller.makeBoxedRef.remote(2);
  await kill(caller);
  const e = await rejection(box2.ref);
  assert.is(e.code, 'OWNER_DIED');
});

test('explicit release frees the object at once', async () => {
  const ref = put(new Uint8Array(10));
  assert.ok(store().has(ref.id));
  release(ref);
  assert.not.ok(store().has(ref.id));
  const c = CounterActor.remote(0);
  const ghost = put(1);
  release(ghost);
  assert.is((await rejection(c.incr.remote(ghost))).code, 'OBJECT_LOST');
});

test('an object is freed once no reference remains (garbage collected)', async () => {
  let id = '';
  (() => {
    const ref = put(new Float64Array(1 << 16));
    id = ref.id;
  })();
  assert.ok(store().has(id));
  await until(
    () => {
      gc();
      return !store().has(id);
    },
    5000,
    'the finalizer to free the object',
  );
});

test('an object borrowed by an actor stays until the borrower is gone', async () => {
  const c = CounterActor.remote(0);
  const ref = put([1, 2, 3]);
  // Nested, so the actor keeps a ref rather than the value; echo hands it back to us.
  const back = (await c.echo.remote({ ref })) as { ref: ObjectRef<number[]> };
  assert.equal(await back.ref, [1, 2, 3]);
  release(ref);
  release(back.ref);
  const holdOver = Date.now() + 400; // transfer hold is 200 ms in this suite
  await until(() => Date.now() > holdOver, 2000, 'the transfer hold to pass');
  assert.ok(store().has(ref.id), 'still borrowed by the actor');
  await kill(c);
  await until(() => !store().has(ref.id), 5000, 'the borrow to end with the borrower');
});

test('wait returns the first refs to finish; get honours timeoutMs', async () => {
  const c = CounterActor.options({ maxConcurrency: 8 }).remote(0);
  const refs = [c.slowIncr.remote(1, 400), c.slowIncr.remote(1, 10), c.slowIncr.remote(1, 20)];
  const [ready, rest] = await wait(refs, { numReturns: 2 });
  assert.equal(ready, [refs[1], refs[2]]);
  assert.equal(rest, [refs[0]]);
  const [none, all] = await wait([c.slowIncr.remote(1, 1000)], { timeoutMs: 50 });
  assert.is(none.length, 0);
  assert.is(all.length, 1);
  assert.is(
    (await rejection(get(c.slowIncr.remote(1, 1000), { timeoutMs: 50 }))).code,
    'GET_TIMEOUT',
  );
  const many = Array.from({ length: 1000 }, (_, i) => c.incr.remote(i));
  const [done] = await wait(many, { numReturns: 1000 });
  assert.is(done.length, 1000);
});

test.run();
