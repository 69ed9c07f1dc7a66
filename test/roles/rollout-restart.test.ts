// D3: a rollout whose process dies outside any call is restarted by the runtime; its first call
// on the new incarnation — a weight push, as the sync publish and the async weight push make —
// loads the engine first instead of failing on a missing one.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { Rollout } from '../../roles/rollout.ts';
import { actorInfo, defineActor, init, shutdown } from '../../runtime/index.ts';
import { until } from '../runtime/helpers.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

const RolloutActor = defineActor<typeof Rollout>(
  new URL('../../roles/rollout.ts', import.meta.url),
  'Rollout',
);
let root = '';
let model = '';

test.before(async () => {
  root = mkdtempSync(join(tmpdir(), 'rtjob-rollout-restart-'));
  model = await writeTinyModel(root);
  await init({ address: 'local', local: { node: { numCpus: 2 } } });
});
test.after(async () => {
  await shutdown();
  rmSync(root, { recursive: true, force: true });
});

test('a restarted rollout takes a weight push as its first call', async () => {
  const r = RolloutActor.options({ maxRestarts: 1 }).remote({
    pretrain: model,
    engine: 'simulated',
    generateMaxLen: 4,
    promptMaxLen: 16,
    nSamplesPerPrompt: 1,
  });
  await r.ready.remote();
  await r.updateWeights.remote({ version: 1, tensors: {} });
  const first = await actorInfo(r);
  process.kill(first.pid!, 'SIGKILL');
  await until(
    async () => {
      const i = await actorInfo(r);
      return i.state === 'ALIVE' && i.incarnation === 2;
    },
    30_000,
    'the restart',
  );
  await r.updateWeights.remote({ version: 2, tensors: {} });
  assert.is(await r.getVersion.remote(), 2);
});

test.run();
