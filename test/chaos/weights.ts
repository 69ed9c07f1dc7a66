/**
 * Weights by reference across nodes: on a cluster of three node agent processes (their own node
 * ids), the trainer's weights reach every other node once, whatever its number of engines, and
 * every engine ends with the trainer's bits. The counts are the runtime's own: each process's
 * object store counts the fetches it served, per fetching node and path (`objectStats`).
 *
 * Node 1 holds the trainer and one engine; node 2 runs with `RTJOB_OBJECT_SHM=0`, so its bytes
 * cross the socket as they would between machines (and, given a {@link Netns}, it lives in its own
 * network namespace: its bytes cross a veth); node 3 keeps shared memory on. Fake GPUs place the
 * roles: each engine asks for one, and node 1 has one, node 2 three, node 3 two.
 *
 * Run by `test/train/weights-across-nodes.test.ts` (plain processes) and `npm run chaos` (node 2
 * in a network namespace).
 *
 * @module
 */
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { remoteRoles } from '../../train/ppo/remote-roles.ts';
import type { PolicyUpdate, Roles } from '../../train/ppo/roles.ts';
import { applyPolicy, loadPolicy, stagePolicy } from '../../train/ppo/weight-sync.ts';
import { listActors, ObjectRef, objectStats } from '../../runtime/index.ts';
import { tinyTrainSample, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { type ChaosResult, ChaosCluster, emptyResult, type Netns, netns } from './harness.ts';
import { compileRunConfig } from '../../train/ppo/run-config.ts';

process.env.RTJOB_QUIET_BACKEND = '1';

const samples = Array.from({ length: 8 }, (_, i) => tinyTrainSample(6 + (i % 4), i));

/** Fetches served, by fetching node. */
export type Served = Record<string, { socket: number; sharedMemory: number }>;

/** Fetches the process at `address` has served, by node, less those counted in `before`. */
async function servedSince(address: string, before: Served = {}): Promise<Served> {
  const out: Served = {};
  for (const s of (await objectStats(address)).fetchesServed) {
    const b = before[s.node] ?? { socket: 0, sharedMemory: 0 };
    const d = { socket: s.socket - b.socket, sharedMemory: s.sharedMemory - b.sharedMemory };
    if (d.socket || d.sharedMemory) out[s.node] = d;
  }
  return out;
}

/** What one sync was seen to fetch: served by the trainer, and by each relaying engine. */
export interface Sync {
  what: string;
  trainer: Served;
  relays: Served[];
}

/**
 * Starts the cluster (node 2 in `net` when given), places the roles, trains and delivers two
 * versions (a load, then a stage and apply), and asserts the fetch counts and every engine's
 * digest; stops everything it started. What each sync was seen to fetch is appended to `syncs`
 * (so a failed run still shows it) and returned.
 */
export async function weightsAcrossNodes(net?: Netns, syncs: Sync[] = []): Promise<Sync[]> {
  const root = mkdtempSync(join(tmpdir(), 'rtjob-wnodes-'));
  const cluster = new ChaosCluster({ nodes: 0, ...(net ? { host: net.hostIp } : {}) });
  let roles: Roles | undefined;
  try {
    await cluster.start();
    await cluster.addNode({ numGpus: 1, host: net?.hostIp });
    await cluster.addNode({
      numGpus: 3,
      env: { RTJOB_OBJECT_SHM: '0' },
      ...(net ? { prefix: net.prefix, host: net.nsIp } : {}),
    });
    await cluster.addNode({ numGpus: 2, host: net?.hostIp });
    const [n1, n2, n3] = [0, 1, 2].map((i) => cluster.nodeId(i)) as [string, string, string];
    // Wide enough that each MLP matrix passes the 1 MiB shared-memory threshold.
    const model = await writeTinyModel(root, { intermediate_size: 4096 });
    const o = parseTrainPpoFlags([
      '--pretrain',
      model,
      '--rollout-num-engines',
      '6',
      '--rollout-num-gpus-per-engine',
      '1',
      '--init-kl-coef',
      '0',
      '--train-batch-size',
      '8',
      '--micro-train-batch-size',
      '8',
      '--eval-dataset',
      '',
    ]);
    const r = (roles = await remoteRoles(compileRunConfig(o, 2)));
    assert.equal(r.nodes, { trainer: n1, rollouts: [n1, n2, n2, n2, n3, n3] }, 'placed as planned');

    const actors = (await listActors()).filter((a) => a.state === 'ALIVE');
    const trainerAt = actors.find((a) => a.spec.exportName === 'Trainer')!.address!;
    const rollouts = actors.filter((a) => a.spec.exportName === 'Rollout');
    assert.is(rollouts.length, 6);
    if (net) {
      const inNs = rollouts.filter((a) => a.address?.startsWith(`${net.nsIp}:`));
      assert.equal(
        inNs.map((a) => a.nodeId),
        [n2, n2, n2],
        "node 2's engines serve in the netns",
      );
    }

    /** Delivers `p` by `deliver` and checks who fetched what, and the engines' bits. */
    const check = async (p: PolicyUpdate, deliver: () => Promise<void>, what: string) => {
      assert.ok(p.weights instanceof ObjectRef);
      assert.is((p.weights as ObjectRef<unknown>).owner, trainerAt, 'the trainer owns the weights');
      const at = [trainerAt, ...rollouts.map((a) => a.address!)];
      const before = await Promise.all(at.map((a) => servedSince(a)));
      await deliver();
      const after = await Promise.all(at.map((a, i) => servedSince(a, before[i])));
      const [byTrainer, ...byRollout] = after as [Served, ...Served[]];
      const relays = rollouts
        .map((a, i) => ({ on: a.nodeId, served: byRollout[i]! }))
        .filter((x) => Object.keys(x.served).length > 0)
        .sort((a, b) => a.on!.localeCompare(b.on!));
      syncs.push({ what, trainer: byTrainer, relays: relays.map((x) => x.served) });
      // The trainer: one fetch per node (each the first of its node: over the socket).
      assert.equal(
        byTrainer,
        {
          [n1]: { socket: 1, sharedMemory: 0 },
          [n2]: { socket: 1, sharedMemory: 0 },
          [n3]: { socket: 1, sharedMemory: 0 },
        },
        `${what}: the trainer served each node once`,
      );
      // One engine of each other node served the rest of its node (node 2 over the socket).
      const expected = [
        { on: n2, served: { [n2]: { socket: 2, sharedMemory: 0 } } },
        { on: n3, served: { [n3]: { socket: 1, sharedMemory: 0 } } },
      ].sort((a, b) => a.on.localeCompare(b.on));
      assert.equal(relays, expected, `${what}: one engine per other node relayed`);
      const trained = await r.trainer.weightsDigest();
      assert.is(trained.version, p.version);
      for (const [i, rollout] of r.rollouts.entries()) {
        assert.equal(await rollout.weightsDigest(), trained, `${what}: engine ${i} holds its bits`);
      }
    };

    const before = await r.trainer.weightsDigest();
    await r.trainer.train(samples);
    const v1 = await r.policy();
    assert.is.not((await r.trainer.weightsDigest()).sha256, before.sha256, 'training changed them');
    await check(v1, () => loadPolicy(r, v1), 'load');

    // Async: fetched ahead while the trainer is idle, loaded later; the same routes, the same counts.
    await r.trainer.train(samples.slice(0, 4));
    const v2 = await r.policy();
    await check(
      v2,
      async () => {
        await stagePolicy(r, v2);
        await applyPolicy(r, v2);
      },
      'stage + apply',
    );
    return syncs;
  } finally {
    await roles?.close();
    await cluster.close();
    rmSync(root, { recursive: true, force: true });
  }
}

/**
 * The chaos tool's variant: node 2 in its own network namespace ({@link netns}), so its fetches
 * cross a veth. `calls` counts the syncs checked; a wrong count or digest is the result's error.
 */
export async function weightsOverNetns(): Promise<ChaosResult> {
  const scenario = 'weights by ref, node in a netns';
  let net;
  try {
    net = netns();
  } catch (e) {
    return { ...emptyResult(scenario), error: (e as Error).message };
  }
  const syncs: Sync[] = [];
  try {
    await weightsAcrossNodes(net, syncs);
    return { ...emptyResult(scenario), calls: syncs.length };
  } catch (e) {
    const seen = syncs.map((s) => `${s.what}: ${JSON.stringify(s)}`).join('; ');
    return {
      ...emptyResult(scenario),
      calls: syncs.length,
      error: (e as Error).message.split('\n')[0]!,
      note: seen || 'no sync was counted',
    };
  } finally {
    net.remove();
  }
}
