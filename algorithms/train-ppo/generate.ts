/**
 * Calls to the rollouts: groups spread round-robin over the engines, held-out evaluation, weight
 * publishes, and the error budget. Every call goes through {@link onRollout}: a rollout that died
 * (during the call, or before it, outside any call) is restarted, given the current weights, and
 * called again, so a group lost with it re-runs once and no episode runs on stale weights.
 *
 * @module
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { GroupResult } from '../../actors/agent/episode-runner.ts';
import { ErrorBudgetExceededError } from '../../actors/agent/errors.ts';
import type { PromptItem } from '../../actors/rollout.ts';
import { isRtjobError } from '../../runtime/errors.ts';
import type { RunContext, Weights } from './context.ts';
import { isEngineError } from '../../actors/engines/http/errors.ts';
import { isRoleDied, WeightSyncError, type WeightSyncPhase } from './errors.ts';
import { answers, describeEngine, killHung, watch, withDeadline } from './health.ts';
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
 * yields exactly one group result.
 */
export async function generate(ctx: RunContext, items: PromptItem[]): Promise<GroupResult[]> {
  const n = ctx.roles.rollouts.length;
  return Promise.all(
    items.map((item, k) =>
      onRollout(ctx, k % n, (r, minVersion) => r.runGroup(item, { minVersion })),
    ),
  );
}

/**
 * Sends `w` to every engine and records it as the run's current weights (what a restarted
 * rollout is given). A rollout that does not answer a health probe first is restarted (then
 * given `w`); one that dies during the push is restarted and given `w` again. Each push has a
 * deadline: a rollout that does not answer it is restarted the same way, and an engine that
 * failed a step on every server fails the sync; either way a {@link WeightSyncError} names the
 * rollout, its engine and the phase, and nothing waits forever.
 */
export async function pushWeights(ctx: RunContext, w: Weights): Promise<void> {
  const ms = ctx.o.weightSyncTimeoutMs + ctx.o.engineHealthTimeoutMs;
  await Promise.all(
    ctx.roles.rollouts.map(async (_, i) => {
      const incarnation = ctx.restarts[i] ?? 0;
      if (ctx.roles.killRollout && !(await answers(ctx, i))) {
        const why = `did not answer a health probe within ${ctx.o.engineHealthTimeoutMs} ms before the weight publish of version ${w.version}`;
        await killHung(ctx, i, incarnation, why);
        await restartRollout(ctx, i, incarnation, new Error(`it ${why}`), true);
      }
      await onRollout(ctx, i, (r) =>
        withDeadline(
          pushTo(ctx, i, r, w),
          ms,
          () =>
            new WeightSyncError(
              w.version,
              i,
              describeEngine(ctx, i),
              'push',
              `the rollout did not answer within ${ms} ms`,
            ),
        ),
      );
    }),
  );
  ctx.published = w;
}

/** Engine errors of servers that died or were taken out: the update can land once one rejoins. */
const serverGone = new Set(['network', 'server-down', 'no-server']);

/**
 * Pushes `w` to rollout `r`. Where every server of its engine died during the update, the servers
 * are out of routing and the next attempt records the version for them to load when they rejoin
 * (a probe reloads them), so it is sent again a few times; any other failure of the engine fails
 * the sync with a {@link WeightSyncError} naming the phase.
 */
async function pushTo(
  ctx: RunContext,
  i: number,
  r: Roles['rollouts'][number],
  w: Weights,
): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await r.updateWeights(w);
    } catch (err) {
      const phase = isEngineError(err) ? (err as { phase?: WeightSyncPhase }).phase : undefined;
      if (!isEngineError(err) || !phase) throw err;
      if (attempt < 3 && serverGone.has(err.code)) {
        ctx.log.line(`warn  rollout ${i}: ${err.message}; sending version ${w.version} again`);
        await delay(250 * attempt);
        continue;
      }
      throw new WeightSyncError(w.version, i, describeEngine(ctx, i), phase, err.message, {
        cause: err,
      });
    }
  }
}

/** Sends the trainer's weights to every engine; returns the new version and the time taken. */
export async function publishWeights(
  ctx: RunContext,
): Promise<{ version: number; syncMs: number }> {
  const t0 = performance.now();
  const w = await withDeadline(
    ctx.roles.trainer.weights(),
    ctx.o.weightSyncTimeoutMs,
    () =>
      new WeightSyncError(
        -1,
        -1,
        'trainer',
        'fetch',
        `the trainer did not hand out its weights within ${ctx.o.weightSyncTimeoutMs} ms`,
      ),
  );
  await pushWeights(ctx, w);
  return { version: w.version, syncMs: performance.now() - t0 };
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
function restartRollout(
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
    if (w) await ctx.roles.rollouts[i]!.updateWeights(w);
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
export function account(ctx: RunContext, groups: GroupResult[]): void {
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
