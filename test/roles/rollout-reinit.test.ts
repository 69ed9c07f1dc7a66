// A rollout killed outside any of its calls (between two steps) is restarted by the runtime with
// the pretrained weights; the driver must notice before the next episode runs on it, push the
// weights of the current version, and still train every prompt exactly once and on-policy.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trainPpo } from '../../train/ppo/main.ts';
import { remoteRoles } from '../../train/ppo/remote-roles.ts';
import type { Roles } from '../../train/ppo/roles.ts';
import { listActors } from '../../runtime/api.ts';
import { until } from '../runtime/helpers.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';
import { withDeadline } from '../../train/ppo/health.ts';

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

/** The (only) rollout's live actor record. */
async function liveRollout() {
  return (await listActors()).find((a) => a.spec.exportName === 'Rollout' && a.state === 'ALIVE');
}

/** SIGKILLs the rollout's worker and waits until the runtime has a new one ALIVE. */
async function killRolloutAndAwaitRestart(): Promise<void> {
  const old = await liveRollout();
  process.kill(old!.pid!, 'SIGKILL');
  await until(
    async () => {
      const a = await liveRollout();
      return a && a.pid !== old!.pid;
    },
    60_000,
    'the rollout restart',
  );
}

/** Pids this suite stopped, resumed at the end whatever happened (so no stopped process is left). */
const stopped: number[] = [];
test.after.each(() => {
  for (const pid of stopped.splice(0)) {
    try {
      process.kill(pid, 'SIGCONT');
    } catch {
      // gone
    }
  }
});

/** SIGSTOPs the rollout's worker: it stops answering, as a hung engine does. */
async function stopRollout(): Promise<void> {
  const a = await liveRollout();
  stopped.push(a!.pid!);
  process.kill(a!.pid!, 'SIGSTOP');
}

/**
 * The run's roles as actors, with `faults[v]` done to the rollout around the push of weights
 * version `v`: `after` it returned (the next call it gets is the next step's episodes) or
 * `before` it is sent.
 */
function withFaults(
  faults: Record<number, { when: 'before' | 'after'; fault: () => Promise<void> }>,
) {
  const done = new Set<number>();
  const place = async (...args: Parameters<typeof remoteRoles>): Promise<Roles> => {
    const roles = await remoteRoles(...args);
    const real = roles.rollouts[0]!;
    // Weights travel as refs the trainer owns: the version of each is known from the handout.
    const versions = new Map<unknown, number>();
    const policy = async () => {
      const p = await roles.policy();
      versions.set(p.weights, p.version);
      return p;
    };
    // The load of version v: a push (sync) or the load of what was staged (async).
    const around = async <T>(v: number, load: () => Promise<T>): Promise<T> => {
      const f = done.has(v) ? undefined : faults[v];
      if (f) done.add(v);
      if (f?.when === 'before') await f.fault();
      const out = await load();
      if (f?.when === 'after') await f.fault();
      return out;
    };
    const wrapped = new Proxy(real, {
      get: (t, prop) =>
        prop === 'updateWeights'
          ? (w: Parameters<typeof real.updateWeights>[0]) =>
              around(versions.get(w) ?? -1, () => real.updateWeights(w))
          : prop === 'loadStaged'
            ? (v: number) => around(v, () => real.loadStaged(v))
            : (t as unknown as Record<string | symbol, unknown>)[prop],
    });
    return { ...roles, policy, rollouts: [wrapped] };
  };
  return { place, done };
}

/** `p`, or a failure once `ms` pass: a hang must fail the test, not stall the suite. */
const within = <T>(p: Promise<T>, ms: number): Promise<T> =>
  withDeadline(p, ms, () => new Error(`the run still hangs after ${ms} ms`));

const flags = (extra: string[]): string[] => [
  ...tinyRunArgs(model, join(root, 'out'), { 'prompt-data': data, 'max-steps': 3 }),
  ...extra,
];

for (const mode of ['sync', 'async'] as const) {
  test(`${mode}: a rollout killed between steps is re-initialised with the current weights before its next episode`, async () => {
    const { place, done } = withFaults({
      1: { when: 'after', fault: killRolloutAndAwaitRestart },
    });
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
    assert.ok(done.has(1), 'the kill happened');
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

test('a rollout that stops answering, between steps and during a weight push, is killed, restarted and re-initialised', async () => {
  const { place, done } = withFaults({
    1: { when: 'after', fault: stopRollout },
    2: { when: 'before', fault: stopRollout },
  });
  const lines: string[] = [];
  const rows: Record<string, number>[] = [];
  const s = await within(
    trainPpo(
      flags(['--engine-health-timeout-ms', '1500', '--weight-sync-timeout-ms', '2000']),
      {},
      {
        roles: place,
        log: { line: (t) => void lines.push(t), metric: (_s, v) => void rows.push(v) },
      },
    ),
    150_000,
  );
  assert.ok(done.has(1) && done.has(2), 'both faults happened');
  assert.is(s.steps, 3);
  // At least the two stops; a loaded machine may stall a healthy rollout past a 1.5 s probe too.
  assert.ok(s.rolloutRestarts >= 2, lines.join('\n'));
  assert.ok(
    lines.some((l) => /rollout 0 \(builtin\) did not answer a health probe within 1500 ms/.test(l)),
    lines.join('\n'),
  );
  assert.equal(
    [...s.trainedPrompts].sort((a, b) => a - b),
    records.map((_, i) => i),
    'each prompt of the epoch exactly once',
  );
  const trained = rows.filter((r) => r.reward_mean !== undefined);
  assert.equal(
    trained.map((r) => r.staleness_max),
    [0, 0, 0],
  );
});

test.run();
