import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { defineTask, get, init, put, shutdown } from '../../runtime/index.ts';
import type { boom, pid, slowSquare, square } from '../fixtures/runtime/tasks.ts';
import { fixture, rejection } from './helpers.ts';

const sq = defineTask<typeof square>(fixture('tasks.ts'), 'square');
const slow = defineTask<typeof slowSquare>(fixture('tasks.ts'), 'slowSquare');
const workerPid = defineTask<typeof pid>(fixture('tasks.ts'), 'pid');
const fails = defineTask<typeof boom>(fixture('tasks.ts'), 'boom');

test.before(async () => {
  await init({ address: 'local', local: { node: { numCpus: 2 } }, taskPoolSize: 2 });
});
test.after(async () => {
  await shutdown();
});

test('tasks run in pool workers and return their results', async () => {
  assert.is(await sq.remote(7), 49);
  assert.equal(await get([1, 2, 3].map((x) => sq.remote(x))), [1, 4, 9]);
  const pids = new Set(await get(Array.from({ length: 6 }, () => workerPid.remote())));
  assert.is(pids.size, 2, 'spread over the two pool workers');
  assert.not.ok(pids.has(process.pid));
});

test('async tasks overlap; refs are resolved as arguments', async () => {
  const t0 = Date.now();
  const out = await get(Array.from({ length: 8 }, (_, i) => slow.remote(i, 200)));
  assert.is(out[3], 9);
  assert.ok(Date.now() - t0 < 1200);
  assert.is(await sq.remote(put(5)), 25);
  assert.is(await sq.remote(sq.remote(3)), 81);
});

test('a task error reaches the caller typed; a missing export names it', async () => {
  const e = await rejection(fails.remote('no good'));
  assert.is(e.code, 'TASK');
  assert.is(e.remoteName, 'TypeError');
  assert.is(e.message, 'no good');
  const missing = defineTask<typeof square>(fixture('tasks.ts'), 'cube');
  assert.match((await rejection(missing.remote(2))).message, /no export 'cube'/);
  const badModule = defineTask<typeof square>(fixture('broken-import.ts'), 'x');
  assert.match((await rejection(badModule.remote(2))).message, /broken on purpose/);
  assert.is(await sq.remote(2), 4, 'the pool keeps serving');
});

test.run();
