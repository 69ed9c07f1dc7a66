/**
 * Weights by reference: trainer rank 0 puts each version once and the driver passes the ref on,
 * so the engines fetch the bytes from the trainer (never through the driver) and load them
 * bit-identically; on a node other than the trainer's one engine relays its copy to the rest.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { remoteRoles } from '../../train/ppo/remote-roles.ts';
import type { Roles } from '../../train/ppo/roles.ts';
import { applyPolicy, loadPolicy, stagePolicy, weightRoutes } from '../../train/ppo/weight-sync.ts';
import { init, listActors, ObjectRef, put } from '../../runtime/index.ts';
import { tinyTrainSample, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { compileRunConfig } from '../../train/ppo/run-config.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-wref-'));
let roles: Roles | undefined;

test.after(async () => {
  await roles?.close();
  rmSync(root, { recursive: true, force: true });
});

test('routes: engines on the trainer node fetch from it; elsewhere one engine per node relays', () => {
  assert.equal(weightRoutes('A', ['A', 'A'], [0, 1]), { direct: [0, 1], relays: [] });
  assert.equal(weightRoutes('A', ['A', 'B', 'B', 'C', 'B'], [0, 1, 2, 3, 4]), {
    direct: [0, 3],
    relays: [{ via: 1, to: [2, 4] }],
  });
  assert.equal(weightRoutes('A', ['B', 'B', 'B'], [2]), { direct: [2], relays: [] });
  assert.equal(weightRoutes(undefined, [], [0, 1]), { direct: [0, 1], relays: [] });
});

const samples = Array.from({ length: 8 }, (_, i) => tinyTrainSample(6 + (i % 4), i));

test('every engine loads the trained weights bit-identically; the driver only holds a ref', async () => {
  const model = await writeTinyModel(root);
  await init({ address: 'local', local: { node: { numCpus: 4 } } });
  const o = parseTrainPpoFlags([
    '--pretrain',
    model,
    '--rollout-num-engines',
    '2',
    '--actor-num-replicas',
    '2',
    '--init-kl-coef',
    '0',
    '--train-batch-size',
    '8',
    '--micro-train-batch-size',
    '2',
    '--eval-dataset',
    '',
  ]);
  roles = await remoteRoles(compileRunConfig(o, 2));
  const r = roles;
  const before = await r.trainer.weightsDigest();
  await r.trainer.train(samples);
  const p = await r.policy();
  await loadPolicy(r, p);

  const trained = await r.trainer.weightsDigest();
  assert.is(p.version, 1);
  assert.is(trained.version, 1);
  assert.is.not(trained.sha256, before.sha256, 'training changed the weights');
  for (const [i, rollout] of r.rollouts.entries()) {
    assert.equal(await rollout.weightsDigest(), trained, `engine ${i} holds the trainer's bits`);
  }
  // The ref the driver passed to both engines was never fetched here, and a trainer rank owns it.
  assert.ok(p.weights instanceof ObjectRef);
  const ref = p.weights as ObjectRef<unknown>;
  assert.not.ok(ref.isSettled, 'the driver never fetched the weights');
  assert.is.not(ref.owner, put(0).owner, 'the driver does not own them');
  const actors = await listActors();
  const addressesOf = (cls: string) =>
    actors.filter((a) => a.state === 'ALIVE' && a.spec.exportName === cls).map((a) => a.address);
  assert.ok(addressesOf('Trainer').includes(ref.owner), 'a trainer rank owns them');

  // As if both engines ran on a node without a trainer: engine 0 fetches and relays to engine 1.
  r.nodes = { trainer: 'node-a', rollouts: ['node-b', 'node-b'] };
  await r.trainer.train(samples.slice(0, 4));
  const relay = await r.rollouts[0]!.relayWeights((await r.policy()).weights);
  assert.not.ok(relay.weights.isSettled);
  assert.ok(addressesOf('Rollout').includes(relay.weights.owner), 'the relaying engine owns it');
  const v2 = await r.policy();
  await loadPolicy(r, v2);
  assert.is(v2.version, 2);
  const now = await r.trainer.weightsDigest();
  for (const [i, rollout] of r.rollouts.entries()) {
    assert.equal(await rollout.weightsDigest(), now, `engine ${i} holds version 2's bits`);
  }

  // Async: a version is staged while the trainer is idle and loaded later; an engine that lost
  // its stage (here: never given it) fetches the version itself.
  await r.trainer.train(samples.slice(0, 4));
  const v3 = await r.policy();
  const d3 = await r.trainer.weightsDigest();
  await stagePolicy(r, v3, [0]);
  assert.equal(await r.rollouts[0]!.weightsDigest(), now, 'staged is not loaded');
  await applyPolicy(r, v3);
  for (const [i, rollout] of r.rollouts.entries()) {
    assert.equal(await rollout.weightsDigest(), d3, `engine ${i} holds version 3's bits`);
  }
  assert.not.ok(await r.rollouts[0]!.loadStaged(v3.version), 'a stage is loaded once');
});

test.run();
