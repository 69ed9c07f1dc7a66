/**
 * A rollout the runtime restarted between calls (killed while idle, so no call failed) is a
 * restart of the run all the same (H16): the weight sync that finds it logs a warn line, counts
 * it in `rollout_restarts` and re-initialises it before loading the new weights.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { PolicyUpdate, Roles } from '../../train/ppo/roles.ts';
import type { RunContext } from '../../train/ppo/run-state.ts';
import { syncWeights } from '../../train/ppo/weight-sync.ts';

test('a rollout restarted between calls is logged, counted and re-initialised at the next sync', async () => {
  const calls: string[] = [];
  const lines: string[] = [];
  let restartedSinceReady = [0];
  const rollout = {
    updateWeights: async (w: unknown) => void calls.push(`load ${String(w)}`),
  } as unknown as Roles['rollouts'][number];
  const roles = {
    rollouts: [rollout, rollout],
    restartRollout: async (i: number) => {
      calls.push(`ready ${i}`);
      restartedSinceReady = [];
    },
    restartedRollouts: async () => restartedSinceReady,
  } as unknown as Roles;
  const ctx = {
    roles,
    o: { weightSyncTimeoutMs: 5_000, engineHealthTimeoutMs: 5_000 },
    restarts: [],
    restarting: new Map(),
    state: { rolloutRestarts: 0 },
    log: { line: (t: string) => void lines.push(t) },
    published: { version: 1, weights: 'v1' },
  } as unknown as RunContext;
  const v2 = { version: 2, weights: 'v2' } as unknown as PolicyUpdate;

  await syncWeights(ctx, v2, 'load');
  assert.is(ctx.state.rolloutRestarts, 1);
  assert.match(
    lines.join('\n'),
    /^warn {2}rollout 0 was restarted outside any call \(its process died between calls; found before the weight sync of version 2\)/,
  );
  assert.match(lines.join('\n'), /info {2}rollout 0 is back \(restart 1, weights version 1\)/);
  // Made ready and given the run's current weights before the new ones.
  assert.equal(calls.slice(0, 2), ['ready 0', 'load v1']);
  assert.equal(calls.filter((c) => c === 'load v2').length, 2);

  await syncWeights(ctx, { ...v2, version: 3 }, 'load');
  assert.is(ctx.state.rolloutRestarts, 1, 'a restart is counted once');
});

test.run();
