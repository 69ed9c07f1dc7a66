import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../train/ppo/main.ts';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { placeRoles } from '../../train/ppo/placement.ts';
import type { FlagError } from '../../train/driver-flags.ts';
import { listActors } from '../../runtime/api.ts';
import type { ActorInfo } from '../../runtime/protocol.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
delete process.env.RTJOB_ADDRESS;
const root = mkdtempSync(join(tmpdir(), 'rtjob-colocate-'));
process.env.HOME = root;
let model = '';
test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

const flags = {
  colocateAllModels: true,
  rolloutNumEngines: 2,
  rolloutNumGpusPerEngine: 1,
  actorNumNodes: 1,
  actorNumGpusPerNode: 1,
  refNumGpusPerNode: 1,
  criticNumNodes: 1,
  criticNumGpusPerNode: 1,
  initKlCoef: 0.01,
  advantageEstimator: 'gae' as const,
  actorNumReplicas: 1,
  criticNumReplicas: 1,
};

test('colocated roles share GPU bundles by fractions that never exceed a bundle', () => {
  const p = placeRoles(flags);
  assert.equal(p.bundles, [
    { CPU: 1, GPU: 1 },
    { CPU: 1, GPU: 1 },
  ]);
  const onZero = [p.rollout(0), p.role('trainer'), p.role('reference'), p.role('critic')];
  assert.ok(onZero.every((r) => r.bundleIndex === 0 && r.numGpus > 0 && r.numGpus < 1));
  assert.ok(onZero.reduce((a, r) => a + r.numGpus, 0) <= 1);
  assert.equal(p.rollout(1), { numCpus: 1, numGpus: 1, bundleIndex: 1 });
  const cpuOnly = placeRoles({
    ...flags,
    rolloutNumEngines: 1,
    rolloutNumGpusPerEngine: 0,
    actorNumGpusPerNode: 0,
    refNumGpusPerNode: 0,
    criticNumGpusPerNode: 0,
  });
  assert.equal(cpuOnly.bundles, [{ CPU: 1 }]);
  assert.is(cpuOnly.role('trainer').numGpus, 0);
  const apart = placeRoles({ ...flags, colocateAllModels: false });
  assert.equal(apart.bundles, []);
  assert.equal(apart.role('trainer'), { numCpus: 0, numGpus: 1 });
});

test('data-parallel ranks spread over the bundles: rank i beside rollout i', () => {
  const p = placeRoles({
    ...flags,
    rolloutNumGpusPerEngine: 0,
    actorNumGpusPerNode: 0,
    refNumGpusPerNode: 0,
    criticNumGpusPerNode: 0,
    actorNumReplicas: 2,
    criticNumReplicas: 2,
  });
  assert.equal(p.bundles, [{ CPU: 1 }, { CPU: 1 }]);
  assert.equal(
    [
      p.role('trainer', 0).bundleIndex,
      p.role('trainer', 1).bundleIndex,
      p.role('critic', 1).bundleIndex,
    ],
    [0, 1, 1],
  );
  // Bundle 1 holds rollout 1, trainer rank 1 and critic rank 1; bundle 0 the reference too.
  assert.is(p.role('trainer', 1).numCpus, 0.3333);
  assert.is(p.rollout(0).numCpus, 0.25);
  const three = placeRoles({
    ...flags,
    rolloutNumEngines: 1,
    actorNumReplicas: 3,
    advantageEstimator: 'group_norm' as const,
    initKlCoef: 0,
  });
  assert.is(three.bundles.length, 3);
  assert.is(three.role('trainer', 2).numCpus, 1);
});

test("OpenRLHF's --actor-num-nodes × --actor-num-gpus-per-node: ranks of one GPU each", () => {
  const o = parseTrainPpoFlags([
    '--actor-num-nodes',
    '2',
    '--actor-num-gpus-per-node',
    '4',
    '--advantage-estimator',
    'gae',
    '--critic-num-gpus-per-node',
    '2',
    '--colocate-all-models',
    '--rollout-num-engines',
    '8',
  ]);
  assert.is(o.actorNumReplicas, 8);
  assert.is(o.criticNumReplicas, 2);
  const p = placeRoles(o);
  assert.is(p.strategy, 'PACK', 'spans nodes');
  assert.is(p.bundles.length, 8);
  assert.equal(p.role('trainer', 7).bundleIndex, 7);
  const apart = placeRoles({ ...o, colocateAllModels: false });
  assert.is(apart.role('trainer', 3).numGpus, 1, 'one GPU per rank');
  assert.is(apart.role('critic', 1).numGpus, 1);
  assert.is(placeRoles(parseTrainPpoFlags([])).strategy, 'STRICT_PACK');
  const shared = parseTrainPpoFlags(['--actor-num-gpus-per-node', '0.5']);
  assert.is(shared.actorNumReplicas, 1, 'a share of a GPU is one rank');
  const refused = (argv: string[], flag: string, text: RegExp) => {
    try {
      parseTrainPpoFlags(argv);
      assert.unreachable(`${argv.join(' ')} was accepted`);
    } catch (e) {
      assert.is((e as FlagError).flag, flag);
      assert.match((e as Error).message, text);
    }
  };
  refused(['--actor-num-nodes', '2'], '--actor-num-nodes', /--actor-num-replicas/);
  refused(['--actor-num-gpus-per-node', '1.5'], '--actor-num-gpus-per-node', /whole GPUs/);
  refused(
    ['--actor-num-gpus-per-node', '2', '--actor-num-replicas', '3'],
    '--actor-num-replicas',
    /disagrees with --actor-num-nodes × --actor-num-gpus-per-node = 2/,
  );
});

test('--colocate-all-models places every role in one placement group and trains', async () => {
  let seen: ActorInfo[] = [];
  const s = await trainPpo(
    tinyRunArgs(model, join(root, 'out'), {
      'colocate-all-models': true,
      'agent-func': fileURLToPath(
        new URL('../fixtures/agents/multi-turn-step.ts', import.meta.url),
      ),
      'rollout-batch-size': 2,
      'train-batch-size': 4,
      'micro-train-batch-size': 4,
      'max-steps': 2,
      'init-kl-coef': 0.01,
    }),
    {},
    {
      log: {
        line: () => undefined,
        metric: (step) => {
          if (step === 1)
            void listActors().then((a) => (seen = a.filter((x) => x.state === 'ALIVE')));
        },
      },
    },
  );
  assert.is(s.steps, 2);
  const roles = seen.filter((a) => ['Rollout', 'Trainer', 'Reference'].includes(a.spec.exportName));
  assert.is(roles.length, 3, seen.map((a) => a.spec.exportName).join(','));
  const groups = new Set(roles.map((a) => a.options.placementGroupId));
  assert.is(groups.size, 1);
  assert.ok([...groups][0], 'in a placement group');
  assert.ok(
    roles.every(
      (a) =>
        a.options.bundleIndex === 0 &&
        (a.options.resources.CPU ?? 0) > 0 &&
        (a.options.resources.CPU ?? 0) < 1,
    ),
  );
});

test.run();
