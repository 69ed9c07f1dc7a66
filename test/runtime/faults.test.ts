import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  type ClusterInfo,
  actorInfo,
  defineActor,
  getActor,
  init,
  kill,
  listActors,
  shutdown,
} from '../../runtime/index.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { alive, fixture, rejection, until } from './helpers.ts';

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');
let cluster: ClusterInfo;

test.before(async () => {
  cluster = await init({ address: 'local', local: { node: { numCpus: 4 } } });
});
test.after(async () => {
  await shutdown();
});

test('kill -9 of a worker: in-flight call fails with ActorDiedError, the actor restarts', async () => {
  const c = CounterActor.options({ maxRestarts: 1 }).remote(5);
  assert.is(await c.incr.remote(1), 6);
  const pid = await c.pid.remote();
  const inflight = c.slowIncr.remote(1, 5000);
  await until(async () => (await actorInfo(c)).state === 'ALIVE');
  process.kill(pid, 'SIGKILL');
  const e = await rejection(inflight);
  assert.is(e.code, 'ACTOR_DIED');
  assert.is(e.context?.signal, 'SIGKILL');
  assert.match(e.message, /slowIncr/);
  // The constructor ran again: state is back to the start value.
  assert.is(await c.get.remote(), 5);
  const info = await actorInfo(c);
  assert.is(info.state, 'ALIVE');
  assert.is(info.numRestarts, 1);
  assert.is.not(await c.pid.remote(), pid);
});

test('after the last restart the actor is DEAD and calls fail fast with the cause', async () => {
  const c = CounterActor.remote(0);
  const e = await rejection(c.dieWith.remote('last words before exit', 3));
  assert.is(e.code, 'ACTOR_DIED');
  assert.is(e.context?.exitCode, 3);
  assert.ok((e.context?.stderrTail as string[]).some((l) => l.includes('last words before exit')));
  assert.is((await actorInfo(c)).state, 'DEAD');
  const t0 = Date.now();
  const again = await rejection(c.get.remote());
  assert.is(again.code, 'ACTOR_DIED');
  assert.ok(Date.now() - t0 < 500, 'fails fast');
});

test('maxTaskRetries re-runs a call that was in flight when the worker died', async () => {
  const c = CounterActor.options({ maxRestarts: 2, maxTaskRetries: 1 }).remote(10);
  const pid = await c.pid.remote();
  const inflight = c.slowIncr.remote(5, 1500);
  await new Promise((r) => setTimeout(r, 200)); // let the call reach the worker
  process.kill(pid, 'SIGKILL');
  assert.is(await inflight, 15, 'the retried call ran on the fresh actor');
  assert.is((await actorInfo(c)).numRestarts, 1);
});

test('a retried call keeps its place before calls made after the failure', async () => {
  const c = CounterActor.options({ maxRestarts: 1, maxTaskRetries: 1 }).remote(0);
  const pid = await c.pid.remote();
  const first = c.append.remote('a', 1500);
  await new Promise((r) => setTimeout(r, 200)); // let the call reach the worker
  process.kill(pid, 'SIGKILL');
  const second = c.append.remote('b', 0);
  assert.is(await second, 'a,b');
  assert.is(await first, 'a');
});

test('kill with noRestart makes the actor DEAD; without it the actor restarts', async () => {
  const c = CounterActor.options({ maxRestarts: 3 }).remote(0);
  const pid = await c.pid.remote();
  await kill(c, { noRestart: false });
  await until(
    async () => (await actorInfo(c)).numRestarts === 1 && (await actorInfo(c)).state === 'ALIVE',
  );
  assert.is.not(await c.pid.remote(), pid);
  await kill(c);
  const info = await until(async () => {
    const i = await actorInfo(c);
    return i.state === 'DEAD' ? i : undefined;
  });
  assert.is(info!.deathCause?.reason, 'killed');
  assert.is((await rejection(c.get.remote())).code, 'ACTOR_DIED');
});

test('a driver that exits takes its actors with it; detached actors stay', async () => {
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(fixture('driver.ts'))], {
    env: {
      ...process.env,
      RTJOB_ADDRESS: cluster.address,
      RTJOB_TOKEN: cluster.token,
      DETACHED_NAME: 'survivor',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const code = await new Promise((r) => child.on('close', r));
  assert.is(code, 0);
  const ids = JSON.parse(out.trim()) as {
    owned: string;
    ownedPid: number;
    detached: string;
    detachedPid: number;
  };
  await until(
    async () => (await listActors()).find((a) => a.actorId === ids.owned)?.state === 'DEAD',
  );
  const owned = (await listActors()).find((a) => a.actorId === ids.owned)!;
  assert.is(owned.deathCause?.reason, 'owner-died');
  await until(() => !alive(ids.ownedPid), 5000, 'the owned worker to exit');
  const survivor = await getActor<typeof Counter>('survivor');
  assert.is(await survivor.incr.remote(1), 3);
  assert.ok(alive(ids.detachedPid));
  await kill(survivor);
});

test('a driver script that ends without shutdown() exits, and its workers with it', async () => {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(fixture('forgetful-driver.ts'))],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const code = await new Promise((r) => child.on('close', (c, sig) => r(sig ?? c)));
  clearTimeout(timer);
  assert.is(code, 0, 'exited by itself');
  const { n, pid } = JSON.parse(out.trim()) as { n: number; pid: number };
  assert.is(n, 42);
  await until(() => !alive(pid), 5000, 'the worker to exit with its driver');
});

test.run();
