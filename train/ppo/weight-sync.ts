/**
 * New weights to the engines, by reference: trainer rank 0 `put`s each version once
 * (`Trainer.shareWeights`) and the driver hands the ref on, so the bytes go from the trainer to
 * the engines and never through the driver. The engines on the trainer's node fetch that ref (the
 * runtime writes one shared-memory file for all of them); on any other node one engine fetches it
 * and re-shares its copy (`Rollout.relayWeights`), and the node's other engines fetch that, so
 * the weights cross to each node once, not once per engine.
 *
 * In a run every call of a sync is guarded ({@link guarded}): a health probe first, a deadline,
 * a restart of a rollout that dies or hangs (generate.ts), a resend where an engine lost its
 * servers mid-update; a sync that cannot finish fails with a {@link WeightSyncError} naming the
 * rollout, its engine and the phase.
 *
 * @module
 */
import { setTimeout as delay } from 'node:timers/promises';
import { isEngineError } from '../../engines/http/errors.ts';
import type { RunContext } from './run-state.ts';
import { WeightSyncError, type WeightSyncPhase } from './errors.ts';
import { onRollout, restartRollout } from './generate.ts';
import { answers, describeEngine, killHung, withDeadline } from './health.ts';
import type { PolicyUpdate, Roles } from './roles.ts';

/** Which rollouts fetch from the trainer, and which load through a relay on their own node. */
export interface WeightRoutes {
  direct: number[];
  relays: { via: number; to: number[] }[];
}

/**
 * Routes for rollouts `which`: those on the trainer's node (or on an unknown node, or alone on
 * theirs) fetch from the trainer; on every other node the first of them relays to the rest.
 */
export function weightRoutes(
  trainerNode: string | undefined,
  rolloutNodes: readonly (string | undefined)[],
  which: readonly number[],
): WeightRoutes {
  const direct: number[] = [];
  const byNode = new Map<string, number[]>();
  for (const i of which) {
    const node = rolloutNodes[i];
    if (node === undefined || node === trainerNode) direct.push(i);
    else byNode.set(node, [...(byNode.get(node) ?? []), i]);
  }
  const relays: WeightRoutes['relays'] = [];
  for (const [via, ...to] of byNode.values()) {
    if (to.length === 0) direct.push(via!);
    else relays.push({ via: via!, to });
  }
  return { direct: direct.sort((a, b) => a - b), relays };
}

/** How a sync calls rollout `i`: plainly, or in a run {@link guarded}. */
export type RolloutCall = (
  i: number,
  call: (r: Roles['rollouts'][number]) => Promise<void>,
) => Promise<void>;

const plain =
  (roles: Roles): RolloutCall =>
  (i, call) =>
    call(roles.rollouts[i]!);

const everyRollout = (roles: Roles): number[] => roles.rollouts.map((_, i) => i);

/**
 * Delivers `p` to rollouts `which` along {@link weightRoutes}: loaded now, or (`stage`) fetched
 * and kept for {@link applyPolicy}.
 */
async function deliver(
  roles: Roles,
  p: PolicyUpdate,
  which: readonly number[],
  mode: 'load' | 'stage',
  each: RolloutCall,
): Promise<void> {
  const take = (i: number, w: PolicyUpdate['weights']) =>
    each(i, (r) => (mode === 'load' ? r.updateWeights(w) : r.stageWeights(w)));
  const routes = weightRoutes(roles.nodes?.trainer, roles.nodes?.rollouts ?? [], which);
  await Promise.all([
    ...routes.direct.map((i) => take(i, p.weights)),
    ...routes.relays.map(async ({ via, to }) => {
      let relayed: PolicyUpdate['weights'] = p.weights;
      await each(via, async (r) => {
        relayed = (await r.relayWeights(p.weights, mode === 'load' ? 'now' : 'staged')).weights;
      });
      await Promise.all(to.map((i) => take(i, relayed)));
    }),
  ]);
}

/** Loads `p` on rollouts `which` (default: all). */
export function loadPolicy(
  roles: Roles,
  p: PolicyUpdate,
  which: readonly number[] = everyRollout(roles),
  each: RolloutCall = plain(roles),
): Promise<void> {
  return deliver(roles, p, which, 'load', each);
}

/**
 * Has rollouts `which` (default: all) fetch `p` without loading it yet ({@link applyPolicy} loads
 * it). The async loop stages each version as soon as it is trained, while the trainer is idle: a
 * trainer busy with the next batch would answer the fetches only when that call ends, and the
 * publish would hold the engines' version gate that long.
 */
export function stagePolicy(
  roles: Roles,
  p: PolicyUpdate,
  which: readonly number[] = everyRollout(roles),
  each: RolloutCall = plain(roles),
): Promise<void> {
  return deliver(roles, p, which, 'stage', each);
}

/**
 * Loads the staged `p` on every rollout; one that lost it (restarted since) loads `p` itself,
 * fetching from the trainer.
 */
export async function applyPolicy(
  roles: Roles,
  p: PolicyUpdate,
  each: RolloutCall = plain(roles),
): Promise<void> {
  const missed = new Set<number>();
  await Promise.all(
    everyRollout(roles).map((i) =>
      each(i, async (r) => {
        if (!(await r.loadStaged(p.version))) missed.add(i);
      }),
    ),
  );
  if (missed.size > 0) await loadPolicy(roles, p, [...missed], each);
}

/**
 * One step of a weight sync of `version` in a run, on every rollout: `load` (push and load),
 * `stage` (fetch only, async) or `apply` (load what was staged). `load` and `apply` record `p` as
 * the run's current weights, what a restarted rollout is given.
 */
export async function syncWeights(
  ctx: RunContext,
  p: PolicyUpdate,
  step: 'load' | 'stage' | 'apply',
): Promise<void> {
  // A fetch ahead of the load needs no probe of its own: the load (`apply`) is probed, and the
  // fetch has its deadline.
  const each = guarded(ctx, p.version, step !== 'stage');
  if (step !== 'stage') await noticeRestarts(ctx, p.version);
  if (step === 'stage') return stagePolicy(ctx.roles, p, everyRollout(ctx.roles), each);
  if (step === 'load') await loadPolicy(ctx.roles, p, everyRollout(ctx.roles), each);
  else await applyPolicy(ctx.roles, p, each);
  ctx.published = p;
}

/**
 * A rollout the runtime restarted between calls (killed while idle) would load the next weights
 * and go on unnoticed: it is a restart of the run like any other, logged, counted in
 * `rollout_restarts` and re-initialised (engine, current weights) before the sync.
 */
async function noticeRestarts(ctx: RunContext, version: number): Promise<void> {
  const restarted = (await ctx.roles.restartedRollouts?.()) ?? [];
  const why = new Error(
    `its process died between calls; found before the weight sync of version ${version}`,
  );
  await Promise.all(restarted.map((i) => restartRollout(ctx, i, ctx.restarts[i] ?? 0, why, false)));
}

/** Sends the trainer's weights to every engine; returns the new version and the time taken. */
export async function publishWeights(
  ctx: RunContext,
): Promise<{ version: number; syncMs: number }> {
  const t0 = performance.now();
  const p = await trainerWeights(ctx);
  await syncWeights(ctx, p, 'load');
  return { version: p.version, syncMs: performance.now() - t0 };
}

/** The trainer's current weights (a ref, in a cluster), within `--weight-sync-timeout-ms`. */
export function trainerWeights(ctx: RunContext): Promise<PolicyUpdate> {
  const ms = ctx.o.weightSyncTimeoutMs;
  return withDeadline(
    ctx.roles.policy(),
    ms,
    () =>
      new WeightSyncError(
        -1,
        -1,
        'trainer',
        'fetch',
        `the trainer did not hand out its weights within ${ms} ms`,
      ),
  );
}

/** Engine errors of servers that died or were taken out: the update can land once one rejoins. */
const serverGone = new Set(['NETWORK', 'SERVER_DOWN', 'NO_SERVER']);

/**
 * Calls of a sync of `version` in a run. A rollout that does not answer a health probe first
 * (unless `probe` is false) is killed and restarted (then given the current weights); every call goes through `onRollout` (a
 * rollout that dies during it is restarted and called again) under a deadline, and a rollout that
 * does not answer by then is restarted the same way. Where every server of a rollout's engine
 * died during the update, the call is sent again a few times (the servers load the version when
 * they rejoin); any other failure of the engine fails the sync with a {@link WeightSyncError}
 * naming the phase.
 */
export function guarded(ctx: RunContext, version: number, probe = true): RolloutCall {
  const ms = ctx.o.weightSyncTimeoutMs + ctx.o.engineHealthTimeoutMs;
  return async (i, call) => {
    const incarnation = ctx.restarts[i] ?? 0;
    if (probe && ctx.roles.killRollout && !(await answers(ctx, i))) {
      const why = `did not answer a health probe within ${ctx.o.engineHealthTimeoutMs} ms before the weight sync of version ${version}`;
      await killHung(ctx, i, incarnation, why);
      await restartRollout(ctx, i, incarnation, new Error(`it ${why}`), true);
    }
    await onRollout(ctx, i, (r) =>
      withDeadline(
        resending(ctx, i, version, () => call(r)),
        ms,
        () =>
          new WeightSyncError(
            version,
            i,
            describeEngine(ctx, i),
            'push',
            `the rollout did not answer within ${ms} ms`,
          ),
      ),
    );
  };
}

async function resending(
  ctx: RunContext,
  i: number,
  version: number,
  call: () => Promise<void>,
): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (err) {
      const phase = isEngineError(err) ? (err as { phase?: WeightSyncPhase }).phase : undefined;
      if (!isEngineError(err) || !phase) throw err;
      if (attempt < 3 && serverGone.has(err.code)) {
        ctx.log.line(`warn  rollout ${i}: ${err.message}; sending version ${version} again`);
        await delay(250 * attempt);
        continue;
      }
      throw new WeightSyncError(version, i, describeEngine(ctx, i), phase, err.message, {
        cause: err,
      });
    }
  }
}
