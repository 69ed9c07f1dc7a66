/**
 * Save on notice: a SIGTERM (Slurm preemption, a spot reclaim, a Kubernetes eviction, `rtjob
 * stop-job`) or SIGUSR1 (Slurm's `--signal=B:USR1@N`) stops the run and writes a checkpoint of
 * the last finished step within `--preempt-save-s` (default 25 s: GKE gives 30 s of notice), also
 * when no `--save-steps` checkpoint is due.
 *
 * The step in flight is abandoned while it generates (the trainer still holds the last finished
 * step, so the checkpoint is written at once, beside the generation) and finished when it already
 * trains (the loops start nothing after the notice). A `--save-steps` checkpoint being written is
 * waited for instead of written twice. Episodes in flight are dropped from the ledger (`stopped`):
 * the checkpoint's data position is the last finished step's, so a resumed run samples their
 * prompts again.
 *
 * @module
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { readEnv } from '../../runtime/env.ts';
import { latestCheckpoint, saveCheckpoint } from './context.ts';
import { closeLedger } from './ledger-run.ts';
import type { TrainPpoOptions } from './options.ts';
import type { RunContext, RunSummary } from './run-state.ts';

/** What a save on notice did. */
export interface PreemptOutcome {
  saved: boolean;
  /** The step the checkpoint holds (saved), or the last finished one. */
  step?: number;
  /** From the notice to the checkpoint on disk. */
  ms: number;
  /** Why nothing was saved. */
  why?: string;
}

/** How often the notice looks whether the step in flight has finished. */
const pollMs = 20;

/** The save on notice of one run: {@link attach} it to the run, {@link notice} it on a signal. */
export class Preempt {
  private ctx: RunContext | undefined;
  /** Set once the loop has ended by itself (the run finishes: its end is the save). */
  private finishing: Promise<unknown> | undefined;
  private outcome: Promise<PreemptOutcome> | undefined;
  /** `--preempt-save-s` in milliseconds, once attached. */
  private deadlineMs = 25_000;

  /** The run to save, once it has its context. */
  attach(ctx: RunContext): void {
    this.ctx = ctx;
    this.deadlineMs = ctx.o.preemptSaveS * 1000;
  }

  /** The run's loop ended without a notice: `end` is the rest of the run (final save, policy). */
  finish(end: Promise<unknown>): void {
    this.finishing = end;
  }

  /** Whether a notice came. */
  get noticed(): boolean {
    return this.outcome !== undefined;
  }

  /** A notice came (`signal`): saves once, however many signals follow. */
  notice(signal: string): Promise<PreemptOutcome> {
    this.outcome ??= this.save(signal, performance.now());
    return this.outcome;
  }

  private async save(signal: string, t0: number): Promise<PreemptOutcome> {
    const ctx = this.ctx;
    const ms = () => performance.now() - t0;
    if (!ctx) return { saved: false, ms: 0, why: 'the run had not started its first step' };
    ctx.stopRequested = true;
    const { o, state } = ctx;
    const deadline = t0 + this.deadlineMs;
    ctx.log.line(
      `stop  ${signal}: saving a checkpoint of the last finished step within ${this.deadlineMs / 1000}s (--preempt-save-s)`,
    );
    if (this.finishing) {
      const done = await within(
        this.finishing.then(() => true),
        deadline,
      );
      return done
        ? { saved: true, step: state.step, ms: ms() }
        : { saved: false, ms: ms(), why: 'the run was finishing and did not end in time' };
    }
    // The step in flight trains: it ends (the loop starts no other) before anything is saved.
    while (ctx.stepsDone !== state.step && performance.now() < deadline)
      await new Promise((r) => setTimeout(r, pollMs));
    if (ctx.stepsDone !== state.step)
      return this.done(ctx, {
        saved: false,
        ms: ms(),
        why: `step ${state.step} did not finish in time`,
      });
    await within(ctx.saving?.catch(() => '') ?? Promise.resolve(''), deadline);
    const step = state.step;
    if (latestCheckpoint(o.ckptPath)?.step !== step) {
      const wrote = await within(
        saveCheckpoint(ctx).then(() => true),
        deadline,
      ).catch((err: unknown) => {
        ctx.log.line(`error the checkpoint on notice failed: ${(err as Error).message}`);
        return false;
      });
      if (!wrote)
        return this.done(ctx, {
          saved: false,
          step,
          ms: ms(),
          why: 'the checkpoint was not written in time',
        });
    }
    return this.done(ctx, { saved: true, step, ms: ms() });
  }

  private done(ctx: RunContext, out: PreemptOutcome): PreemptOutcome {
    closeLedger(ctx, 'stopped');
    ctx.log.line(
      out.saved
        ? `stop  checkpoint of step ${out.step} in ${resolve(ctx.o.ckptPath)} saved ${(out.ms / 1000).toFixed(2)}s after the notice (deadline ${this.deadlineMs / 1000}s)`
        : `stop  no checkpoint saved on notice: ${out.why}`,
    );
    return out;
  }
}

/** `p`'s value, or false once `deadline` (a `performance.now()` time) has passed. */
async function within<T>(p: Promise<T>, deadline: number): Promise<T | false> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((r) => {
    timer = setTimeout(() => r(false), Math.max(0, deadline - performance.now()));
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * `RTJOB_AUTO_RESUME=1` (`rtjob submit --auto-resume`, a requeued Slurm job): resume from
 * `--ckpt-path`'s latest checkpoint when there is one, else start fresh.
 */
export function autoResume(
  o: Pick<TrainPpoOptions, 'ckptPath' | 'loadCheckpoint'>,
  env: Record<string, string | undefined>,
): void {
  if (o.loadCheckpoint || readEnv('RTJOB_AUTO_RESUME', env) !== true) return;
  if (existsSync(join(o.ckptPath, 'latest'))) o.loadCheckpoint = true;
}

/** The run's loop stopped for a notice: waits for its save and returns the run's summary so far. */
export async function onNotice(preempt: Preempt, ctx: RunContext): Promise<RunSummary> {
  await preempt.notice('stop');
  ctx.summary.steps = ctx.stepsDone ?? ctx.state.step;
  ctx.summary.rolloutRestarts = ctx.state.rolloutRestarts;
  ctx.summary.minutes = (performance.now() - ctx.started) / 60000;
  return ctx.summary;
}

/**
 * `copy` (a context a loop hands `afterStep` with other options) with the progress a save on
 * notice watches, `stepsDone` and `saving`, read from and written to `ctx` itself.
 */
export function shareProgress(ctx: RunContext, copy: RunContext): RunContext {
  for (const key of ['stepsDone', 'saving'] as const)
    Object.defineProperty(copy, key, {
      get: () => ctx[key],
      set: (v: never) => (ctx[key] = v),
      enumerable: true,
    });
  return copy;
}
