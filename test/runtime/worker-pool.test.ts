// The node agent's pool of booted idle workers (`warmWorkers`): it fills up to its size one boot
// at a time, new actors take its processes instead of booting their own, and it refills after.
import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  type LocalCluster,
  defineActor,
  get,
  init,
  kill,
  shutdown,
  startLocalCluster,
} from '../../runtime/index.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { fixture, until } from './helpers.ts';

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');
let cluster: LocalCluster;

/** Child processes of this process: the in-process node agent's workers. */
function children(): Set<number> {
  return new Set(
    readFileSync(`/proc/self/task/${process.pid}/children`, 'utf8')
      .split(' ')
      .filter(Boolean)
      .map(Number),
  );
}

test.before(async () => {
  cluster = await startLocalCluster({ node: { numCpus: 4, warmWorkers: 3 } });
  await init({ address: cluster.address, token: cluster.token });
});
test.after(async () => {
  await shutdown();
  await cluster.close();
});

test('the pool fills to warmWorkers; new actors run in its processes; it refills', async () => {
  await until(() => cluster.node.idleWorkers === 3, 20_000, 'three idle workers');
  const idle = children(); // (may also hold a tsx esbuild service of this test process)
  const actors = [1, 2, 3].map((n) => CounterActor.remote(n));
  const pids = await get(actors.map((a) => a.pid.remote()));
  assert.ok(
    pids.every((p) => idle.has(p)),
    'each actor took a booted idle worker',
  );
  assert.is(new Set(pids).size, 3, 'one process per actor');
  assert.equal(await get(actors.map((a) => a.incr.remote(1))), [2, 3, 4]);
  await until(() => cluster.node.idleWorkers === 3, 20_000, 'the pool to refill');
  await Promise.all(actors.map((a) => kill(a)));
});

test.run();
