import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { actorReady, cancel, defineActor, init, shutdown } from '../../runtime/index.ts';
import type { Busy } from '../fixtures/runtime/busy.ts';
import { fixture, rejection, until } from './helpers.ts';

const BusyActor = defineActor<typeof Busy>(fixture('busy.ts'), 'Busy');
const groups = { io: 2, compute: { maxConcurrency: 1, thread: true } };

test.before(async () => {
  await init({ address: 'local', local: { node: { numCpus: 4 } } });
});
test.after(async () => {
  await shutdown();
});

test('a thread group computing without awaiting holds up no other group', async () => {
  const b = BusyActor.options({ concurrencyGroups: groups }).remote('a');
  await actorReady(b);
  const spin = b.spin.options({ concurrencyGroup: 'compute' }).remote(2000);
  // Sent after the spin on the same connection: on one event loop they would wait for it.
  const io = await b.where.options({ concurrencyGroup: 'io' }).remote();
  const dflt = await b.where.remote();
  assert.is(spin.isSettled, false, 'io and default answered while compute spins');
  const { threadId, spunMs } = await spin;
  assert.ok(spunMs >= 2000);
  assert.is(io.threadId, 0, 'io runs on the main thread');
  assert.is(dflt.threadId, 0);
  assert.is.not(threadId, 0, 'compute runs on its own thread');
});

test('without thread: true, the same method holds up every group (one event loop)', async () => {
  const b = BusyActor.options({ concurrencyGroups: { io: 2, compute: 1 } }).remote('a');
  await actorReady(b);
  const spin = b.spin.options({ concurrencyGroup: 'compute' }).remote(300);
  await b.where.options({ concurrencyGroup: 'io' }).remote();
  assert.is(spin.isSettled, true, 'the io call was answered only after the spin');
});

test("a thread group has its own instance, built from the actor's constructor arguments", async () => {
  const b = BusyActor.options({ concurrencyGroups: groups }).remote('label-1');
  const compute = { concurrencyGroup: 'compute' };
  assert.equal((await b.where.options(compute).remote()).label, 'label-1');
  await b.setX.options(compute).remote(42);
  assert.is(await b.getX.options(compute).remote(), 42, "the group's calls share state");
  assert.is(await b.getX.remote(), undefined, 'the main instance is another one');
});

test('errors, unclonable results and streams in a thread group', async () => {
  const b = BusyActor.options({ concurrencyGroups: groups }).remote('a');
  const compute = { concurrencyGroup: 'compute' };
  const e = await rejection(b.fail.options(compute).remote());
  assert.is(e.name, 'TaskError');
  assert.is((e as unknown as { remoteName: string }).remoteName, 'RangeError');
  assert.match(e.message, /no such thing/);
  assert.is(e.context?.method, 'fail');
  const u = await rejection(b.unclonable.options(compute).remote());
  assert.is((u as unknown as { remoteName: string }).remoteName, 'DataCloneError');
  const gen = b.count.options({ ...compute, numReturns: 'streaming' }).remote(2);
  const first = await gen.next();
  assert.is((await rejection(first.value!)).code, 'INVALID_ARGUMENT');
  assert.is(await b.getX.options(compute).remote(), undefined, 'the thread still serves');
});

test("cancel reaches a running call's AbortSignal on the group's thread", async () => {
  const b = BusyActor.options({
    concurrencyGroups: { compute: { maxConcurrency: 2, thread: true } },
  }).remote('a');
  const compute = { concurrencyGroup: 'compute' };
  const ref = b.untilCancelled.options(compute).remote();
  await b.where.options(compute).remote(); // the call is running there
  assert.is(await cancel(ref), true);
  assert.is((await rejection(ref)).code, 'TASK_CANCELLED');
  await until(() => b.wasAborted.options(compute).remote(), 10_000, 'the thread saw the abort');
});

test('a thread that dies takes the actor with it; it restarts under its maxRestarts', async () => {
  const b = BusyActor.options({ concurrencyGroups: groups, maxRestarts: 1 }).remote('a');
  const compute = { concurrencyGroup: 'compute' };
  await b.setX.options(compute).remote(1);
  const e = await rejection(b.exit.options(compute).remote());
  assert.is(e.code, 'ACTOR_DIED');
  // The restarted actor has a fresh thread (and instance) in the group.
  assert.is(await b.getX.options(compute).remote(), undefined);
  assert.is.not((await b.where.options(compute).remote()).threadId, 0);
});

test('the default group cannot be a thread group', () => {
  assert.throws(
    () => BusyActor.options({ concurrencyGroups: { default: { thread: true } } }).remote('a'),
    /default concurrency group/,
  );
});

test.run();
