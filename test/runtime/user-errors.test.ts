import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  defineActor,
  init,
  isRtjobError,
  kActorId,
  shutdown,
  TaskError,
} from '../../runtime/index.ts';
import type { Thrower } from '../fixtures/runtime/thrower.ts';
import { fixture, rejection } from './helpers.ts';

// Errors thrown in a real worker process reach the caller with their code and fields.
const ThrowerActor = defineActor<typeof Thrower>(fixture('thrower.ts'), 'Thrower');

test.before(async () => {
  await init({ address: 'local', local: { node: { numCpus: 4 } } });
});
test.after(async () => {
  await shutdown();
});

test("a user error's code and readonly fields arrive at the caller", async () => {
  const t = ThrowerActor.remote();
  const e = await rejection(t.quota.remote('ada'));
  assert.ok(e instanceof TaskError);
  assert.ok(isRtjobError(e, 'QUOTA_EXCEEDED'));
  assert.is(e.code, 'QUOTA_EXCEEDED');
  assert.is(e.remoteName, 'QuotaError');
  assert.is(e.message, 'ada used 12 of 10');
  const f = e as TaskError & { user: string; used: number; limits: { soft: number; hard: number } };
  assert.is(f.user, 'ada');
  assert.is(f.used, 12);
  assert.equal(f.limits, { soft: 8, hard: 10 });
  assert.equal([...f.fieldNames].sort(), ['limits', 'used', 'user']);
  assert.throws(() => ((f as { used: number }).used = 0), TypeError, 'fields stay read-only');
  assert.is(e.context?.actorId, t[kActorId]);
  assert.is(e.context?.method, 'quota');
  assert.match(e.remoteStack ?? '', /thrower\.ts/);
});

test('an error on the shared base keeps its code, fields, context and cause', async () => {
  const t = ThrowerActor.remote();
  const e = await rejection(t.shard.remote(3));
  assert.ok(isRtjobError(e, 'SHARD_MISSING'));
  assert.is((e as TaskError).remoteName, 'ShardError');
  assert.is((e as TaskError & { shard: number }).shard, 3);
  assert.is(e.context?.jobId, 'j-7', 'the thrower context is kept');
  assert.is(e.context?.method, 'shard');
  const cause = e.cause as TaskError & { user: string };
  assert.ok(isRtjobError(cause, 'QUOTA_EXCEEDED'));
  assert.is(cause.user, 'inner');
});

test("Node's errno code and fields survive", async () => {
  const t = ThrowerActor.remote();
  const e = await rejection(t.errno.remote());
  assert.is(e.code, 'ENOENT');
  assert.is((e as TaskError & { path: string }).path, '/nope');
});

test('a user error relayed through another actor arrives unchanged', async () => {
  const a = ThrowerActor.remote();
  const b = await a.spawn.remote();
  const e = await rejection(a.relay.remote(b, 'bob'));
  assert.is(e.code, 'QUOTA_EXCEEDED');
  assert.is((e as TaskError & { user: string }).user, 'bob');
  assert.is(e.context?.actorId, b[kActorId], 'the context names the actor that threw');
});

test.run();
