/**
 * Episodes on the rollouts: groups spread round-robin over the engines (a dead rollout's
 * in-flight groups re-run on its restarted process), held-out evaluation, and the error budget.
 *
 * @module
 */
import type { GroupResult } from '../../actors/agent/episode-runner.ts';
import { ErrorBudgetExceededError } from '../../actors/agent/errors.ts';
import type { PromptItem } from '../../actors/rollout.ts';
import type { RunContext } from './context.ts';
import { isRoleDied } from './errors.ts';
import type { Roles } from './roles.ts';

/** Greedy accuracy on the held-out prompts, split across engines. */
export async function evaluate(ctx: RunContext): Promise<number> {
  const { rollouts } = ctx.roles;
  const parts = rollouts.map((_, i) => ctx.evalItems.filter((__, k) => k % rollouts.length === i));
  const res = await Promise.all(
    rollouts.map((_, i) => onRollout(ctx, i, (r) => r.evaluate(parts[i]!))),
  );
  const correct = res.reduce((a, r) => a + r.correct, 0);
  return correct / Math.max(1, ctx.evalItems.length);
}

/** Restarts of one rollout a run tolerates before it gives up. */
export const maxRolloutRestarts = 3;

/**
 * Runs groups for `items` across the engines, round-robin, one call per group, so a rollout that
 * dies loses only its in-flight groups: they are re-run on its restarted process (with the
 * trainer's current weights), and results already returned are kept. Each prompt therefore
 * yields exactly one group result.
 */
export async function generate(ctx: RunContext, items: PromptItem[]): Promise<GroupResult[]> {
  const n = ctx.roles.rollouts.length;
  return Promise.all(items.map((item, k) => runGroupOn(ctx, k % n, item)));
}

function runGroupOn(ctx: RunContext, i: number, item: PromptItem): Promise<GroupResult> {
  return onRollout(ctx, i, (r) => r.runGroup(item));
}

/** Calls rollout `i`; when it dies, waits for its restart and calls again. */
export async function onRollout<T>(
  ctx: RunContext,
  i: number,
  call: (r: Roles['rollouts'][number]) => Promise<T>,
): Promise<T> {
  for (;;) {
    const incarnation = ctx.restarts[i] ?? 0;
    try {
      return await call(ctx.roles.rollouts[i]!);
    } catch (err) {
      if (!isRoleDied(err) || !ctx.roles.restartRollout) throw err;
      ctx.state.groupsRerun++;
      await restartRollout(ctx, i, incarnation, err);
    }
  }
}

/** One restart per death, however many of its calls failed with it. */
function restartRollout(
  ctx: RunContext,
  i: number,
  incarnation: number,
  err: Error,
): Promise<void> {
  if ((ctx.restarts[i] ?? 0) !== incarnation) return ctx.restarting.get(i) ?? Promise.resolve();
  ctx.restarts[i] = incarnation + 1;
  if (incarnation + 1 > maxRolloutRestarts) {
    return Promise.reject(
      new Error(
        `rollout ${i} died ${incarnation + 1} times, more than the ${maxRolloutRestarts} restarts allowed; last: ${err.message}`,
        { cause: err },
      ),
    );
  }
  ctx.state.rolloutRestarts++;
  ctx.log.line(
    `warn  rollout ${i}: ${err.message}; restarting it and re-running its in-flight groups`,
  );
  const p = ctx.roles.restartRollout!(i).then(() =>
    ctx.log.line(`info  rollout ${i} is back (restart ${incarnation + 1})`),
  );
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
