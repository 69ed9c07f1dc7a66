// A rollout killed outside any of its calls (between two steps) is restarted by the runtime with
// the pretrained weights; the driver must notice before the next episode runs on it, push the
// weights of the current version, and still train every prompt exactly once and on-policy.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trainPpo } from '../../algorithms/train-ppo.ts';
import { remoteRoles } from '../../algorithms/train-ppo/remote-roles.ts';
import type { Roles } from '../../algorithms/train-ppo/roles.ts';
import { listActors } from '../../runtime/api.ts';
import { until } from '../runtime/helpers.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
delete process.env.RTJOB_ADDRESS;
const root = mkdtempSync(join(tmpdir(), 'rtjob-rollout-reinit-'));
process.env.HOME = root;
let model = '';
let data = '';
const records = Array.from({ length: 12 }, (_, i) => ({
  prompt: `What is ${i}+1?`,
  solution: `#### ${i + 1}`,
}));

test.before(async () => {
  model = await writeTinyModel(root);
  data = join(root, 'data.jsonl');
  writeFileSync(data, records.map((r) => JSON.stringify(r)).join('\n'));
});
test.after(() => rmSync(root, { recursive: true, force: true }));

/** SIGKILLs the (only) rollout's worker and waits until the runtime has a new one ALIVE. */
async function killRolloutAndAwaitRestart(): Promise<void> {
  const find = async () =>
    (await listActors()).find((a) => a.spec.exportName === 'Rollout' && a.state === 'ALIVE');
  const old = await find();
  process.kill(old!.pid!, 'SIGKILL');
  await until(
    async () => {
      const a = await find();
      return a && a.pid !== old!.pid;
    },
    60_000,
    'the rollout restart',
  );
}

/**
 * The run's roles as actors, with the rollout killed (and restarted by the runtime) right after
 * it has taken weights version `atVersion`: the next call it gets is the next step's episodes.
 */
function killAfterPublish(atVersion: number) {
  const state = { killed: false };
  const place = async (...args: Parameters<typeof remoteRoles>): Promise<Roles> => {
    const roles = await remoteRoles(...args);
    const real = roles.rollouts[0]!;
    const wrapped = new Proxy(real, {
      get: (t, prop) =>
        prop === 'updateWeights'
          ? async (w: Parameters<typeof real.updateWeights>[0]) => {
              await real.updateWeights(w);
              if (w.version === atVersion && !state.killed) {
                state.killed = true;
                await killRolloutAndAwaitRestart();
              }
            }
          : (t as unknown as Record<string | symbol, unknown>)[prop],
    });
    return { ...roles, rollouts: [wrapped] };
  };
  return { place, state };
}

const flags = (extra: string[]): string[] => [
  '--pretrain',
  model,
  '--prompt-data',
  data,
  '--rollout-batch-size',
  '4',
  '--n-samples-per-prompt',
  '2',
  '--train-batch-size',
  '8',
  '--micro-train-batch-size',
  '8',
  '--generate-max-len',
  '4',
  '--eval-dataset',
  '',
  '--overwrite',
  '--save-path',
  join(root, 'out'),
  '--max-steps',
  '3',
  ...extra,
];

for (const mode of ['sync', 'async'] as const) {
  test(`${mode}: a rollout killed between steps is re-initialised with the current weights before its next episode`, async () => {
    const { place, state } = killAfterPublish(1);
    const lines: string[] = [];
    const rows: Record<string, number>[] = [];
    const s = await trainPpo(
      flags(mode === 'async' ? ['--async-train'] : []),
      {},
      {
        roles: place,
        log: { line: (t) => void lines.push(t), metric: (_s, v) => void rows.push(v) },
      },
    );
    assert.ok(state.killed, 'the kill happened');
    assert.is(s.steps, 3);
    assert.is(s.rolloutRestarts, 1, lines.join('\n'));
    assert.ok(
      lines.some((l) => /rollout 0 was restarted .*weights version 0.*version 1/.test(l)),
      lines.join('\n'),
    );
    assert.equal(
      [...s.trainedPrompts].sort((a, b) => a - b),
      records.map((_, i) => i),
      'each prompt of the epoch exactly once',
    );
    const trained = rows.filter((r) => r.reward_mean !== undefined);
    assert.is(trained.length, 3);
    // Sync is on-policy: no token of the restarted rollout may come from the pretrained weights.
    if (mode === 'sync')
      assert.equal(
        trained.map((r) => r.staleness_max),
        [0, 0, 0],
      );
  });
}

test.run();
