import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  TaskCancelledError,
  actorReady,
  cancel,
  defineActor,
  get,
  init,
  shutdown,
} from '../../runtime/index.ts';
import type { Streamer } from '../fixtures/runtime/streamer.ts';
import { fixture, rejection, until } from './helpers.ts';

const StreamerActor = defineActor<typeof Streamer>(fixture('streamer.ts'), 'Streamer');

test.before(async () => {
  await init({ address: 'local', local: { node: { numCpus: 4 } } });
});
test.after(async () => {
  await shutdown();
});

test('a call queued at the worker is dropped and never runs', async () => {
  const s = StreamerActor.options({ concurrencyGroups: { ctl: 1 } }).remote();
  await actorReady(s);
  const held = s.hold.remote();
  const queued = s.mark.remote('x');
  // Both calls reached the worker (the ctl call went after them on the same connection).
  await s.plain.options({ concurrencyGroup: 'ctl' }).remote(0);
  assert.is(await cancel(queued), true);
  const e = await rejection(queued);
  assert.ok(e instanceof TaskCancelledError);
  assert.is(e.code, 'TASK_CANCELLED');
  assert.is(e.context?.method, 'mark');
  await s.release.options({ concurrencyGroup: 'ctl' }).remote();
  assert.is(await held, 'released');
  assert.equal(await s.mark.remote('y'), ['y'], "the cancelled 'x' never ran");
});

test('a call queued in the caller before the actor is up is dropped', async () => {
  const s = StreamerActor.remote();
  const ref = s.mark.remote('early');
  assert.is(await cancel(ref), true);
  assert.is((await rejection(ref)).code, 'TASK_CANCELLED');
  assert.equal(await s.mark.remote('later'), ['later']);
});

test('a running async call has its AbortSignal aborted', async () => {
  const s = StreamerActor.options({ maxConcurrency: 2 }).remote();
  await actorReady(s);
  const ref = s.untilCancelled.remote();
  await until(async () => (await s.plain.remote(0)) === 1, 5000, 'actor serving'); // call is sent
  assert.is(await cancel(ref), true);
  assert.is((await rejection(ref)).code, 'TASK_CANCELLED');
  await until(() => s.wasAborted.remote(), 10_000, 'the method saw its signal abort');
});

test('cancel of a streaming call closes its generator; the next item is TaskCancelledError', async () => {
  const s = StreamerActor.options({ concurrencyGroups: { ctl: 1 } }).remote();
  const gen = s.stall.options({ numReturns: 'streaming' }).remote(1);
  const first = await gen.next();
  assert.is(await first.value!, 0);
  assert.is(await cancel(gen), true);
  const next = await gen.next();
  assert.is(next.done, false);
  assert.is((await rejection(next.value!)).code, 'TASK_CANCELLED');
  assert.is((await gen.next()).done, true);
  await until(
    () => s.wasAborted.options({ concurrencyGroup: 'ctl' }).remote(),
    10_000,
    'the generator saw its signal abort',
  );
});

test('force kills the worker; the actor restarts under its maxRestarts', async () => {
  const s = StreamerActor.options({ maxRestarts: 1, concurrencyGroups: { ctl: 1 } }).remote();
  const pid = await s.pid.remote();
  const ref = s.hold.remote();
  await until(
    async () => (await s.holdsStarted.options({ concurrencyGroup: 'ctl' }).remote()) === 1,
    10_000,
    'hold started',
  );
  assert.is(await cancel(ref, { force: true }), true);
  assert.is((await rejection(ref)).code, 'TASK_CANCELLED');
  // Calls sent before the death is seen fail with ActorDiedError; the restarted actor answers.
  await until(
    async () => (await s.pid.remote().catch(() => pid)) !== pid,
    20_000,
    'the restarted actor',
  );
});

test('cancel of an answered call, or with recursive, does nothing', async () => {
  const s = StreamerActor.remote();
  const ref = s.plain.remote(1);
  assert.is(await ref, 2);
  assert.is(await cancel(ref), false);
  assert.is(await get(ref), 2);
  // The ref led `cancel` to its call while unanswered; answered, it lets go of it (and its
  // arguments), so a ref kept for long retains nothing of the call.
  assert.is(ref._call, undefined);
  assert.match(
    (await rejection(cancel(s.plain.remote(1), { recursive: true }))).message,
    /recursive/,
  );
});

test.run();
