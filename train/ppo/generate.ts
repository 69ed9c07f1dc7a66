/**
 * Calls to the rollouts: groups spread round-robin over the engines, held-out evaluation, and the
 * error budget (weight publishes are in `weight-sync.ts`). Every call goes through {@link onRollout}: a rollout that died
 * (during the call, or before it, outside any call) is restarted, given the current weights, and
 * called again, so a group lost with it re-runs once and no episode runs on stale weights.
 *
 * @module
 */
import { ErrorBudgetExceededError } from '../../agents/errors.ts';
import type { GroupReport } from '../../roles/episode-report.ts';
import type { PromptItem } from '../../roles/rollout.ts';
import { isRtjobError } from '../../runtime/errors.ts';
import type { RunContext } from './run-state.ts';
import { isRoleDied, type WeightSyncError } from './errors.ts';
import { samplesPerGroup } from './episodes.ts';
import { releaseBatches, trainOn, type UpdateStats } from './step.ts';
import { killHung, watch } from './health.ts';
import { sampleGroup } from './ledger-run.ts';
import type { Roles } from './roles.ts';

/** Greedy accuracy on the held-out prompts, split across engines. */
export async function evaluate(ctx: RunContext): Promise<number> {
  const { rollouts } = ctx.roles;
  const parts = rollouts.map((_, i) => ctx.evalItems.filter((__, k) => k % rollouts.length === i));
  const res = await Promise.all(
    rollouts.map((_, i) =>
      onRollout(ctx, i, (r, minVersion) => r.evaluate(parts[i]!, { minVersion })),
    ),
  );
  const correct = res.reduce((a, r) => a + r.correct, 0);
  return correct / Math.max(1, ctx.evalItems.length);
}

/** Restarts of one rollout a run tolerates before it gives up. */
export const maxRolloutRestarts = 3;

/**
 * Runs groups for `items` across the engines, round-robin, one call per group, so a rollout that
 * dies loses only its in-flight groups: they are re-run on its restarted process (with the
 * weights of the current version), and results already returned are kept. Each prompt therefore
 * yields exactly one group report, whose trajectories stay with the rollout that put them (the
 * report holds their reference) and whose sample candidates the rollout already decoded. With
 * `timing`, `imbalanceMs` is how long the engine that finished its groups first then waited for
 * the last one (0 with one engine).
 */
export async function generate(
  ctx: RunContext,
  items: PromptItem[],
  timing?: { imbalanceMs: number },
): Promise<GroupReport[]> {
  const n = ctx.roles.rollouts.length;
  const doneAt = new Array<number>(Math.min(n, items.length)).fill(0);
  const samples = ctx.log.samples ? samplesPerGroup(ctx.o.logSamples, items.length) : 0;
  const seed = ctx.o.seed * 1000003 + ctx.state.step;
  const groups = await Promise.all(
    items.map(async (item, k) => {
      const g = await onRollout(ctx, k % n, (r, minVersion) =>
        sampleGroup(ctx, item, k % n, () =>
          r.runGroup(item, { minVersion, samples, seed: seed + item.index }),
        ),
      );
      doneAt[k % n] = performance.now();
      return g;
    }),
  );
  if (timing) timing.imbalanceMs = doneAt.length ? Math.max(...doneAt) - Math.min(...doneAt) : 0;
  return groups;
}

/** The batch of a group could not be fetched: the rollout that put it died (or lost it). */
function batchLost(err: unknown): boolean {
  return isRtjobError(err, 'OWNER_DIED') || isRtjobError(err, 'OBJECT_LOST');
}

/**
 * {@link trainOn} the kept groups. Their trajectories stay with the rollouts that put them until
 * trained; when one of those rollouts died meanwhile (a batch waiting in the async buffer, or a
 * rollout killed after it answered), the groups are run again on the current weights, as a group
 * lost in flight is, and the update is tried again with them. Returns the groups trained on.
 */
export async function trainKept(
  ctx: RunContext,
  kept: GroupReport[],
): Promise<{ u: UpdateStats; kept: GroupReport[] }> {
  for (let tries = 0; ; tries++) {
    try {
      return { u: await trainOn(kept, ctx.roles, ctx.config.experience, ctx), kept };
    } catch (err) {
      if (!batchLost(err) || tries >= maxRolloutRestarts) throw err;
      ctx.log.line(
        `warn  a batch was lost with the rollout that held it (${(err as Error).message}); re-running its ${kept.length} groups`,
      );
      releaseBatches(kept);
      ctx.state.groupsRerun += kept.length;
      const again = await generate(
        ctx,
        kept.map((g) => ctx.sampler.item(g.index, g.groupId)),
      );
      account(ctx, again);
      kept = again.filter((g) => g.status === 'ok');
    }
  }
}

/** Runs `call` on every rollout (sleep, wake-up), restarting the ones that die meanwhile. */
export async function onEveryRollout(
  ctx: RunContext,
  call: (r: Roles['rollouts'][number]) => Promise<void>,
): Promise<void> {
  await Promise.all(ctx.roles.rollouts.map((_, i) => onRollout(ctx, i, call)));
}

/**
 * Calls rollout `i` with the weights version its engine must hold. When the rollout died during
 * the call, or was restarted before it (its engine is behind that version), waits for its
 * restart, pushes it the current weights, and calls again.
 */
export async function onRollout<T>(
  ctx: RunContext,
  i: number,
  call: (r: Roles['rollouts'][number], minVersion: number) => Promise<T>,
): Promise<T> {
  for (;;) {
    const incarnation = ctx.restarts[i] ?? 0;
    const release = watch(ctx, i);
    try {
      return await call(ctx.roles.rollouts[i]!, ctx.published?.version ?? 0);
    } catch (err) {
      // A push the rollout did not answer: it hangs; killed, it dies like any other.
      const hung =
        isRtjobError(err, 'TRAIN_PPO_WEIGHT_SYNC') && (err as WeightSyncError).phase === 'push';
      if (hung && ctx.roles.killRollout) await killHung(ctx, i, incarnation, err.message);
      const died = isRoleDied(err) || hung;
      if (!(died || isRtjobError(err, 'ROLLOUT_STALE')) || !ctx.roles.restartRollout) throw err;
      ctx.state.groupsRerun++;
      await restartRollout(ctx, i, incarnation, err as Error, died);
    } finally {
      release();
    }
  }
}

/** One restart per death, however many of its calls failed with it. */
export function restartRollout(
  ctx: RunContext,
  i: number,
  incarnation: number,
  err: Error,
  died: boolean,
): Promise<void> {
  if ((ctx.restarts[i] ?? 0) !== incarnation) return ctx.restarting.get(i) ?? Promise.resolve();
  ctx.restarts[i] = incarnation + 1;
  if (incarnation + 1 > maxRolloutRestarts) {
    // A sync that could not finish is the error the user acts on: it names the engine and phase.
    if (isRtjobError(err, 'TRAIN_PPO_WEIGHT_SYNC')) return Promise.reject(err);
    return Promise.reject(
      new Error(
        `rollout ${i} died ${incarnation + 1} times, more than the ${maxRolloutRestarts} restarts allowed; last: ${err.message}`,
        { cause: err },
      ),
    );
  }
  ctx.state.rolloutRestarts++;
  ctx.log.line(
    died
      ? `warn  rollout ${i}: ${err.message}; restarting it and re-running its in-flight groups`
      : `warn  rollout ${i} was restarted outside any call (${err.message}); re-initialising it`,
  );
  const p = (async () => {
    await ctx.roles.restartRollout!(i);
    // The current weights, not the trainer's: in async training the trainer may be a version
    // ahead of the engines, and a batch in generation must not mix versions.
    const w = ctx.published;
    if (w) await ctx.roles.rollouts[i]!.updateWeights(w.weights);
    ctx.log.line(
      `info  rollout ${i} is back (restart ${incarnation + 1}, weights version ${w?.version ?? 0})`,
    );
  })().catch((e: unknown) => {
    // Died again while being re-initialised: the next call finds out and restarts it again.
    if (!isRoleDied(e)) throw e;
  });
  ctx.restarting.set(i, p);
  return p;
}

/**
 * Counts failures: episodes that threw or timed out (what the error budget is measured in) and
 * the groups dropped with them (a group with one failed episode is not trained on). Throws once
 * failed episodes pass the budget.
 */
export function account(ctx: RunContext, groups: GroupReport[]): void {
  const { state, o } = ctx;
  for (const g of groups) {
    state.episodes += g.episodes;
    if (g.status === 'failed') {
      // One error per episode that failed; the group's other episodes ran fine but are dropped.
      state.failed += Math.max(1, g.errors.length);
      state.groupsDropped = (state.groupsDropped ?? 0) + 1;
      ctx.log.line(
        `warn  ${g.errors[0] ?? 'episode failed'}${g.errors.length > 1 ? ` (+${g.errors.length - 1} more in this group)` : ''}`,
      );
    }
  }
  ctx.summary.episodesFailed = state.failed;
  ctx.summary.groupsDropped = state.groupsDropped ?? 0;
  if (state.failed > o.agentErrorBudget * state.episodes) {
    const last = groups.find((g) => g.status === 'failed')?.errors[0] ?? 'see warnings above';
    throw new ErrorBudgetExceededError(
      o.agentFunc ?? '<built-in>',
      state.failed,
      state.episodes,
      last,
      state.groupsDropped ?? 0,
    );
  }
}
