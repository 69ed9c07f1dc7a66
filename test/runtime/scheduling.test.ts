import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  type LocalCluster,
  type NodeAgent,
  actorInfo,
  actorReady,
  defineActor,
  init,
  kill,
  listNodes,
  placementGroup,
  shutdown,
  startLocalCluster,
} from '../../runtime/index.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { alive, fixture, rejection, until } from './helpers.ts';

const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');
let cluster: LocalCluster;
let nodeB: NodeAgent;
const children: ChildProcess[] = [];

test.before(async () => {
  cluster = await startLocalCluster({
    head: { nodeHeartbeatTimeoutMs: 1000, heartbeatIntervalMs: 200 },
    node: { numCpus: 2 },
  });
  nodeB = await cluster.addNode({ numCpus: 2, numGpus: 2, resources: { special: 1, tag: 2 } });
  await init({ address: cluster.address, token: cluster.token });
});
test.after(async () => {
  await shutdown();
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await cluster.close();
});

test('two node agents report their resources', async () => {
  const nodes = await listNodes();
  assert.is(nodes.length, 2);
  const b = nodes.find((n) => n.nodeId === nodeB.nodeId)!;
  assert.is(b.total.GPU, 2);
  assert.is(b.total.special, 1);
});

test('an actor waits in PENDING while resources are busy and starts when they free', async () => {
  const first = CounterActor.options({ resources: { special: 1 } }).remote(0);
  await actorReady(first);
  assert.is((await actorInfo(first)).nodeId, nodeB.nodeId);
  const second = CounterActor.options({ resources: { special: 1 } }).remote(0);
  await new Promise((r) => setTimeout(r, 300));
  assert.is((await actorInfo(second)).state, 'PENDING');
  await kill(first);
  assert.is(await second.incr.remote(1), 1);
  assert.is((await actorInfo(second)).state, 'ALIVE');
  await kill(second);
});

test('a request no node can ever satisfy fails at once with a clear message', async () => {
  const t0 = Date.now();
  const e = await rejection(CounterActor.options({ numGpus: 3 }).remote(0).get.remote());
  assert.is(e.code, 'INFEASIBLE');
  assert.match(e.message, /GPU: 3/);
  assert.ok(Date.now() - t0 < 1000);
  const unicorn = CounterActor.options({ resources: { unicorn: 1 } }).remote(0);
  const e2 = await rejection(actorReady(unicorn));
  assert.is(e2.code, 'INFEASIBLE');
  const info = await actorInfo(unicorn);
  assert.is(info.state, 'DEAD');
  assert.is(info.deathCause?.reason, 'infeasible');
});

test('SPREAD puts actors on different nodes; node affinity pins one', async () => {
  const a = CounterActor.options({ schedulingStrategy: 'SPREAD' }).remote(0);
  const b = CounterActor.options({ schedulingStrategy: 'SPREAD' }).remote(0);
  await Promise.all([actorReady(a), actorReady(b)]);
  assert.is.not((await actorInfo(a)).nodeId, (await actorInfo(b)).nodeId);
  const pinned = CounterActor.options({ schedulingStrategy: { nodeId: nodeB.nodeId } }).remote(0);
  await actorReady(pinned);
  assert.is((await actorInfo(pinned)).nodeId, nodeB.nodeId);
  const e = await rejection(
    actorReady(CounterActor.options({ schedulingStrategy: { nodeId: 'node_nope' } }).remote(0)),
  );
  assert.is(e.code, 'INFEASIBLE');
  await Promise.all([kill(a), kill(b), kill(pinned)]);
});

test('placement groups reserve bundles atomically with each strategy', async () => {
  const spread = placementGroup([{ CPU: 1 }, { CPU: 1 }], { strategy: 'STRICT_SPREAD' });
  await spread.ready();
  const inB1 = CounterActor.options({ placementGroup: spread, bundleIndex: 1, numCpus: 1 }).remote(
    0,
  );
  const inB0 = CounterActor.options({ placementGroup: spread, bundleIndex: 0, numCpus: 1 }).remote(
    0,
  );
  await Promise.all([actorReady(inB0), actorReady(inB1)]);
  const n0 = (await actorInfo(inB0)).nodeId;
  const n1 = (await actorInfo(inB1)).nodeId;
  assert.is.not(n0, n1);

  const tooWide = placementGroup([{ CPU: 1 }, { CPU: 1 }, { CPU: 1 }], {
    strategy: 'STRICT_SPREAD',
  });
  assert.is((await rejection(tooWide.ready())).code, 'INFEASIBLE');

  // Each node has one CPU left; STRICT_PACK of two must wait until the spread group goes.
  const pack = placementGroup([{ CPU: 1 }, { CPU: 1 }], { strategy: 'STRICT_PACK' });
  let packed = false;
  const packReady = pack.ready().then(() => (packed = true));
  await new Promise((r) => setTimeout(r, 300));
  assert.is(packed, false, 'STRICT_PACK waits for a node with room for both bundles');
  await spread.remove();
  await until(
    async () => (await actorInfo(inB0)).state === 'DEAD',
    5000,
    'actors in a removed group die',
  );
  await packReady;
  const inPack = CounterActor.options({ placementGroup: pack, numCpus: 1 }).remote(0);
  assert.is(await inPack.incr.remote(2), 2);
  await pack.remove();
});

test('a silent node is declared dead; its actors and bundles move elsewhere', async () => {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(fixture('node-agent.ts'))],
    {
      env: {
        ...process.env,
        RTJOB_ADDRESS: cluster.address,
        RTJOB_TOKEN: cluster.token,
        NUM_CPUS: '1',
        RESOURCES: '{"tag":1}',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  children.push(child);
  const line = await new Promise<string>((r) => child.stdout!.once('data', (d) => r(String(d))));
  const { nodeId } = JSON.parse(line) as { nodeId: string };
  const c = CounterActor.options({
    maxRestarts: 1,
    maxTaskRetries: 1,
    schedulingStrategy: { nodeId, soft: true },
  }).remote(7);
  assert.is(await c.incr.remote(1), 8);
  assert.is((await actorInfo(c)).nodeId, nodeId);
  const oldPid = await c.pid.remote();
  // SPREAD puts bundle 0 on node B and bundle 1 on the new node (the only two with `tag`).
  const pg = placementGroup([{ tag: 1 }, { tag: 1 }], { strategy: 'SPREAD' });
  await pg.ready();
  const inPg = CounterActor.options({
    placementGroup: pg,
    bundleIndex: 1,
    resources: { tag: 1 },
    maxRestarts: 1,
    maxTaskRetries: 1,
  }).remote(3);
  assert.is(await inPg.incr.remote(1), 4);
  assert.is((await actorInfo(inPg)).nodeId, nodeId);
  child.kill('SIGSTOP'); // silent, not gone: only the heartbeat can tell
  await until(
    async () => (await listNodes()).find((n) => n.nodeId === nodeId)?.state === 'DEAD',
    5000,
    'node declared dead',
  );
  assert.is(await c.incr.remote(1), 8, 'restarted (constructor re-run) on another node');
  const info = await actorInfo(c);
  assert.is.not(info.nodeId, nodeId);
  assert.is(info.numRestarts, 1);
  assert.is(
    await inPg.incr.remote(1),
    4,
    'the bundle moved to node B and its actor restarted there',
  );
  assert.is((await actorInfo(inPg)).nodeId, nodeB.nodeId);
  await pg.remove();
  child.kill('SIGCONT'); // it finds the head gone, stops its workers and exits
  await until(
    () => child.exitCode !== null || child.signalCode !== null,
    5000,
    'stale node agent to exit',
  );
  await until(() => !alive(oldPid), 5000, 'stale worker to exit');
});

test.run();
