/**
 * Dead actors are forgotten after a retention (D9): beyond `maxDeadActors`, oldest first, in
 * memory and in the store (so a restarted head does not reload them), and names resolve without
 * a scan.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  type LocalCluster,
  actorInfo,
  defineActor,
  getActor,
  init,
  kill,
  shutdown,
  startLocalCluster,
} from '../../runtime/index.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { fixture, until } from './helpers.ts';

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');
let cluster: LocalCluster;
let dir: string;

test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'rtjob-retention-'));
  cluster = await startLocalCluster({
    sessionDir: dir,
    head: { sessionDir: dir, maxDeadActors: 2 },
    node: { numCpus: 2 },
  });
  await init({ address: cluster.address, token: cluster.token });
});
test.after(async () => {
  await shutdown();
  await cluster.close();
  rmSync(dir, { recursive: true, force: true });
});

test('D9: only the newest maxDeadActors dead actors are kept, in memory and in SQLite', async () => {
  const ids: string[] = [];
  for (let i = 0; i < 5; i++) {
    const c = CounterActor.options({ name: `r${i}` }).remote(i);
    assert.is(await c.get.remote(), i);
    ids.push((await actorInfo(c)).actorId);
    await kill(c);
  }
  const dead = () =>
    cluster.head
      .listActors()
      .filter((a) => a.state === 'DEAD')
      .map((a) => a.actorId);
  await until(() => dead().length === 2 && !dead().includes(ids[2]!), 10_000, 'pruning');
  assert.equal(dead().sort(), ids.slice(3).sort());
  assert.equal(
    cluster.head.store
      .listActors()
      .map((a) => a.actorId)
      .sort(),
    ids.slice(3).sort(),
    'the store forgets them too',
  );
  const live = CounterActor.options({ name: 'r0' }).remote(7);
  assert.is(
    await (await getActor<typeof Counter>('r0')).get.remote(),
    7,
    'a dead actor’s name is free again',
  );
  await kill(live);
});

test.run();
