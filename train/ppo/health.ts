/**
 * Rollouts that stop answering. A rollout whose process hangs (stopped, its event loop stuck, an
 * engine call that never returns) would hold its calls forever; a dead one is restarted by the
 * runtime. So the driver turns the first into the second: while a rollout has calls in flight it
 * is sent a health probe every `--engine-health-timeout-ms`, and before each weight publish one
 * more; a probe not answered in that time gets the rollout's process killed, the runtime restarts
 * it, and its calls fail over to the restart path of `generate.ts` (re-initialised, re-run).
 *
 * @module
 */
import { runsInProcess } from '../../engines/registry.ts';
import type { RunContext, Watchdog } from './run-state.ts';

/** What rollout `i`'s weights go to, for messages: `builtin`, or the kind and its servers. */
export function describeEngine(ctx: RunContext, i: number): string {
  const { o } = ctx;
  if (runsInProcess(o.engine)) return o.engine;
  if (o.engineLaunch !== undefined) return `${o.engine} (launched by rollout ${i})`;
  return `${o.engine} ${ctx.config.engineShares[i]!.join(',')}`;
}

/**
 * `p`, or `onLate()`'s error once `ms` pass (`p` is then left to settle on its own: the caller
 * kills what it waits on).
 */
export async function withDeadline<T>(p: Promise<T>, ms: number, onLate: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onLate()), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Whether rollout `i` answers a health probe within `--engine-health-timeout-ms`. */
export async function answers(ctx: RunContext, i: number): Promise<boolean> {
  const ms = ctx.o.engineHealthTimeoutMs;
  try {
    await withDeadline(ctx.roles.rollouts[i]!.health(), ms, () => new Error('no answer'));
    return true;
  } catch (err) {
    // Any answer, even a failure (a dead process), is not a hang: the restart path handles it.
    return (err as Error).message !== 'no answer';
  }
}

/**
 * Kills rollout `i` (incarnation `incarnation` of the driver's count) because it did not answer;
 * its calls then fail as for any death. Once per incarnation.
 */
export async function killHung(
  ctx: RunContext,
  i: number,
  incarnation: number,
  why: string,
): Promise<void> {
  if (!ctx.roles.killRollout || (ctx.restarts[i] ?? 0) !== incarnation) return;
  ctx.hung ??= new Set();
  const key = `${i}:${incarnation}`;
  if (ctx.hung.has(key)) return;
  ctx.hung.add(key);
  ctx.log.line(
    `warn  rollout ${i} (${describeEngine(ctx, i)}) ${why}; killing it so that it restarts`,
  );
  await ctx.roles.killRollout(i);
}

/**
 * Watches rollout `i` while the returned release function has not been called: a probe every
 * `--engine-health-timeout-ms` while any caller holds it, and a kill when one goes unanswered.
 * Only for rollouts the driver can kill (remote roles).
 */
export function watch(ctx: RunContext, i: number): () => void {
  if (!ctx.roles.killRollout) return () => undefined;
  ctx.watching ??= new Map();
  const w = ctx.watching.get(i) ?? { holders: 0, timer: undefined };
  ctx.watching.set(i, w);
  if (w.holders++ === 0) schedule(ctx, i, w);
  return () => {
    if (--w.holders === 0 && w.timer) {
      clearTimeout(w.timer);
      w.timer = undefined;
    }
  };
}

function schedule(ctx: RunContext, i: number, w: Watchdog): void {
  const ms = ctx.o.engineHealthTimeoutMs;
  w.timer = setTimeout(() => {
    w.timer = undefined;
    const incarnation = ctx.restarts[i] ?? 0;
    void answers(ctx, i).then(async (ok) => {
      if (!ok) {
        await killHung(ctx, i, incarnation, `did not answer a health probe within ${ms} ms`).catch(
          (e: unknown) => ctx.log.line(`warn  rollout ${i}: kill failed: ${(e as Error).message}`),
        );
      }
      if (w.holders > 0 && !w.timer) schedule(ctx, i, w);
    });
  }, ms);
  // A watchdog never keeps the driver alive by itself.
  w.timer.unref();
}
