/**
 * The episode ledger (`ledger.ts`) wired into a run: a group's call to its engine is booked as
 * it goes out and as it comes back ({@link sampleGroup}), a finished step settles its groups
 * ({@link settleStep}: trained or dropped, and the counts a checkpoint carries), and the end of
 * the run drops what is still in flight and prints the verdict ({@link closeLedger}). Entries go
 * to the job's ledger in the session database through the run's log; the verdict goes to the job
 * page through the job's report.
 *
 * @module
 */
import type { GroupReport } from '../../roles/episode-report.ts';
import type { PromptItem } from '../../roles/rollout.ts';
import { isRtjobError } from '../../runtime/errors.ts';
import { isRoleDied } from './errors.ts';
import { EpisodeLedger, type DropReason } from './ledger.ts';
import type { RunContext } from './run-state.ts';

/** Opens the run's ledger, going on from the checkpoint's counts when the run resumed. */
export function openLedger(ctx: RunContext): EpisodeLedger {
  ctx.ledger = new EpisodeLedger(ctx.o.nSamplesPerPrompt, ctx.state.ledger);
  ctx.state.ledger = ctx.ledger.snapshot();
  return ctx.ledger;
}

/**
 * Runs one group's call to rollout `i` under the ledger: its episodes are `sampling` while the
 * call runs, `sampled` when it answers, and dropped `engine death` when the rollout died under
 * them (the caller runs the group again, as a new attempt).
 */
export async function sampleGroup(
  ctx: RunContext,
  item: PromptItem,
  i: number,
  call: () => Promise<GroupReport>,
): Promise<GroupReport> {
  const ledger = ctx.ledger;
  if (!ledger) return call();
  const attempt = ledger.dispatch(item.groupId, item.index, `rollout-${i}#${ctx.restarts[i] ?? 0}`);
  try {
    const g = await call();
    const seen = g.trajectories.flatMap((t) => [t.versionMin ?? 0, t.versionMax ?? 0]);
    ledger.returned(attempt, {
      status: g.status,
      ...(seen.length ? { versionMin: Math.min(...seen), versionMax: Math.max(...seen) } : {}),
    });
    return g;
  } catch (err) {
    const died =
      isRoleDied(err) ||
      isRtjobError(err, 'ROLLOUT_STALE') ||
      isRtjobError(err, 'TRAIN_PPO_WEIGHT_SYNC');
    ledger.lost(attempt, died ? 'engine death' : 'agent error');
    throw err;
  }
}

/**
 * Step `ctx.state.step` is done with `groups`: the ones in `trained` were trained, the rest are
 * dropped; the counts a checkpoint of this step carries are updated, and the changed entries and
 * the verdict so far are sent.
 */
export function settleStep(
  ctx: RunContext,
  groups: readonly { groupId: string }[],
  trained: readonly { groupId: string }[],
): void {
  const ledger = ctx.ledger;
  if (!ledger) return;
  const keys = [...new Set([...groups, ...trained].map((g) => g.groupId))];
  ledger.settle(keys, new Set(trained.map((g) => g.groupId)), ctx.state.step);
  ctx.state.ledger = ledger.snapshot();
  sendLedger(ctx, false);
}

/** The run ends (done, failed or stopped): what is in flight is dropped; logs the verdict. */
export function closeLedger(ctx: RunContext, reason: DropReason = 'stopped'): void {
  const ledger = ctx.ledger;
  if (!ledger) return;
  ledger.stopAll(reason);
  ctx.log.line(ledger.verdict().line);
  sendLedger(ctx, true);
}

function sendLedger(ctx: RunContext, final: boolean): void {
  const ledger = ctx.ledger!;
  const changed = ledger.takeChanged();
  if (changed.length) ctx.log.ledger?.(changed);
  const v = ledger.verdict(final);
  ctx.log.report?.({ ledger: { verdict: v.line, ok: v.ok, noun: 'episodes', short: v.short } });
}
