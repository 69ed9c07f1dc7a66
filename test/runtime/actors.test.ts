import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  ObjectRef,
  actorInfo,
  actorReady,
  defineActor,
  get,
  getActor,
  init,
  kActorId,
  put,
  shutdown,
} from '../../runtime/index.ts';
import type { BadCtor } from '../fixtures/runtime/bad-ctor.ts';
import type { Caller } from '../fixtures/runtime/caller.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { fixture, rejection } from './helpers.ts';

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');
const CallerActor = defineActor<typeof Caller>(fixture('caller.ts'), 'Caller');

test.before(async () => {
  await init({ address: 'local', local: { node: { numCpus: 4, numGpus: 2 } } });
});
test.after(async () => {
  await shutdown();
});

test('a call runs the method in the actor process and returns its result', async () => {
  const c = CounterActor.remote(10);
  const ref = c.incr.remote(5);
  assert.ok(ref instanceof ObjectRef);
  assert.is(await ref, 15);
  assert.is(await get(c.incr.remote()), 16);
  assert.is.not(await c.pid.remote(), process.pid);
  const info = await actorInfo(c);
  assert.is(info.state, 'ALIVE');
  assert.is(info.actorId, c[kActorId]);
});

test('a handle is not thenable and symbols are not methods', async () => {
  const c = CounterActor.remote(0);
  assert.is((c as unknown as { then?: unknown }).then, undefined);
  assert.is((c as unknown as Record<symbol, unknown>)[Symbol.iterator], undefined);
  assert.is(c.incr, c.incr, 'method objects are memoised');
});

test('calls from one caller to a sequential actor run in order', async () => {
  const c = CounterActor.remote(0);
  const refs = [c.append.remote('a', 30), c.append.remote('b', 0), c.append.remote('c', 10)];
  const out = await get(refs);
  assert.equal(out[2], 'a,b,c');
});

test('maxConcurrency lets async methods overlap', async () => {
  const c = CounterActor.options({ maxConcurrency: 8 }).remote(0);
  await actorReady(c);
  const t0 = Date.now();
  await get(Array.from({ length: 8 }, () => c.slowIncr.remote(1, 150)));
  const took = Date.now() - t0;
  assert.ok(took < 8 * 150 * 0.6, `8 overlapping 150 ms calls took ${took} ms`);
  assert.is(await c.get.remote(), 8);
});

test('an exception reaches the caller typed and the actor keeps serving', async () => {
  const c = CounterActor.remote(1);
  const e = await rejection(c.fail.remote('bad input'));
  assert.is(e.code, 'TASK');
  assert.is(e.remoteName, 'RangeError');
  assert.is(e.message, 'bad input');
  assert.is(e.context?.actorId, c[kActorId]);
  assert.is(e.context?.method, 'fail');
  assert.match(e.remoteStack ?? '', /counter\.ts/);
  assert.is(await c.incr.remote(1), 2);
});

test('typed arrays and nested values round-trip', async () => {
  const c = CounterActor.remote(0);
  const v = {
    a: new Float32Array([1.5, 2.5]),
    b: [1, 'x', null],
    c: new Int32Array([7]),
    d: new Uint8Array([1, 2]),
  };
  const back = (await c.echo.remote(v)) as typeof v;
  assert.ok(back.a instanceof Float32Array);
  assert.equal(Array.from(back.a), [1.5, 2.5]);
  assert.ok(back.c instanceof Int32Array);
  assert.equal(back.b, [1, 'x', null]);
  assert.equal(Array.from(back.d), [1, 2]);
  assert.is(await c.sum.remote(new Float32Array([1, 2, 3])), 6);
});

test('top-level refs are resolved before the call; nested refs arrive as refs', async () => {
  const c = CounterActor.remote(0);
  const x = put(new Float32Array([1, 2, 3, 4]));
  assert.is(await c.sum.remote(x), 10);
  // The result of one call as the argument of the next, without waiting in between.
  assert.is(await c.incr.remote(c.incr.remote(5)), 10);
  const caller = CallerActor.remote();
  assert.is(await caller.readNested.remote({ ref: x }), 4);
});

test('handles and refs can be passed to other actors', async () => {
  const c = CounterActor.remote(100);
  const caller = CallerActor.remote();
  assert.is(await caller.incrVia.remote(c, 1), 101);
  assert.is(await c.get.remote(), 101);
  const ref = await caller.makeRef.remote(3);
  assert.equal(ref, [0, 1, 2]);
});

test('an actor can create actors and hand their handles back', async () => {
  const caller = CallerActor.remote();
  const child = await caller.spawnCounter.remote(41);
  assert.is(await child.incr.remote(1), 42);
  const info = await actorInfo(child);
  assert.match(info.ownerId, /^worker:/);
});

test('named actors are found with getActor', async () => {
  CounterActor.options({ name: 'named-counter' }).remote(7);
  const h = await getActor<typeof Counter>('named-counter');
  assert.is(await h.incr.remote(1), 8);
  const dup = CounterActor.options({ name: 'named-counter' }).remote(0);
  const e = await rejection(dup.get.remote());
  assert.is(e.code, 'NAME_TAKEN');
  assert.is((await rejection(getActor('no-such-actor'))).code, 'NOT_FOUND');
});

test('a module that fails to import fails creation with ActorLoadError', async () => {
  const Broken = defineActor<typeof Counter>(fixture('broken-import.ts'), 'Never');
  const e = await rejection(Broken.remote(0).get.remote());
  assert.is(e.code, 'ACTOR_LOAD');
  assert.match(e.message, /broken on purpose at import time/);
});

test('a missing export or a throwing constructor is an ActorLoadError', async () => {
  const Missing = defineActor<typeof Counter>(fixture('counter.ts'), 'NoSuchExport');
  const e1 = await rejection(actorReady(Missing.remote(0)));
  assert.is(e1.code, 'ACTOR_LOAD');
  assert.match(e1.message, /no export 'NoSuchExport'.*Counter/);
  const Bad = defineActor<typeof BadCtor>(fixture('bad-ctor.ts'), 'BadCtor');
  const h = Bad.remote('nope');
  const e2 = await rejection(h.ping.remote());
  assert.is(e2.code, 'ACTOR_LOAD');
  assert.match(e2.message, /constructor refused: nope/);
  assert.is((await actorInfo(h)).state, 'DEAD');
});

test('GPU actors see exactly their devices; fractional GPUs share one', async () => {
  const whole = CounterActor.options({ numGpus: 1 }).remote(0);
  const half1 = CounterActor.options({ numGpus: 0.5 }).remote(0);
  const half2 = CounterActor.options({ numGpus: 0.5 }).remote(0);
  const cpu = CounterActor.remote(0);
  const [w, h1, h2, c] = await get([
    whole.env.remote('CUDA_VISIBLE_DEVICES'),
    half1.env.remote('CUDA_VISIBLE_DEVICES'),
    half2.env.remote('CUDA_VISIBLE_DEVICES'),
    cpu.env.remote('CUDA_VISIBLE_DEVICES'),
  ]);
  assert.ok(w === '0' || w === '1');
  assert.is(h1, h2, 'two halves share one device');
  assert.is.not(h1, w);
  assert.is(c, '');
});

test('actor env options reach the worker', async () => {
  const c = CounterActor.options({ env: { MY_FLAG: 'on' } }).remote(0);
  assert.is(await c.env.remote('MY_FLAG'), 'on');
});

test.run();
