/**
 * `train_ppo`: the driver of an RL run. `rtjob submit -- train_ppo --agent-func ./agent.ts` runs
 * this file as the job's driver; `node --import tsx algorithms/train-ppo.ts ...` runs it directly.
 *
 * It parses and validates the flags (before anything starts), places the roles (rollout engines,
 * trainer, and reference / critic when the algorithm needs them), then runs the synchronous
 * on-policy loop or, with `--async-train`, the asynchronous off-policy one.
 *
 * @module
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { metrics } from '../runtime/metrics.ts';
import { asyncLoop } from './train-ppo/async-loop.ts';
import { isRoleDied } from './train-ppo/errors.ts';
import { runIfMain } from './driver-flags.ts';
import { FlagError, parseTrainPpoFlags, trainPpoHelp, type TrainPpoOptions } from './train-ppo/flags.ts';
import { inProcessRoles, type Roles } from './train-ppo/roles.ts';
import { finishRun, prepareRun, type RunLog, type RunSummary } from './train-ppo/context.ts';
import { syncLoop } from './train-ppo/sync-loop.ts';

export { parseTrainPpoFlags, trainPpoDefaults, trainPpoHelp, FlagError } from './train-ppo/flags.ts';
export type { TrainPpoOptions } from './train-ppo/flags.ts';
export type { RunSummary } from './train-ppo/context.ts';
export { RoleDiedError, isRoleDied } from './train-ppo/errors.ts';

/** The shipped warm-start model. */
export const defaultPretrain = fileURLToPath(new URL('../actors/model/pretrained/rtjob-tiny-math', import.meta.url));

/** Options of {@link trainPpo} beyond the flags. */
export interface TrainPpoRunOptions {
  /** Where progress and metrics go. @default stdout lines + the head's metrics API */
  log?: RunLog;
  /** Places the roles; @default through the runtime, or in this process with `--in-process` */
  roles?: (o: TrainPpoOptions, totalSteps: number) => Promise<Roles>;
}

/** Resolves defaults that depend on the machine and checks paths, before anything starts. */
export function resolveOptions(o: TrainPpoOptions): TrainPpoOptions {
  const r = { ...o, pretrain: o.pretrain || defaultPretrain };
  if (r.agentFunc && !existsSync(r.agentFunc)) {
    throw new FlagError('--agent-func', `--agent-func: no such file ${r.agentFunc}`);
  }
  if (!existsSync(r.pretrain)) {
    throw new FlagError('--pretrain', `--pretrain: no model directory at ${r.pretrain}`);
  }
  return r;
}

const defaultLog: RunLog = {
  metric: (step, values) => metrics.log(step, values),
  line: (text) => process.stdout.write(`[train_ppo] ${text}\n`),
};

/**
 * Runs `train_ppo` with command-line flags; resolves with the summary.
 *
 * @example
 * const summary = await trainPpo(['--agent-func', './examples/agent.ts', '--max-steps', '20']);
 */
export async function trainPpo(
  argv: readonly string[],
  env: Record<string, string | undefined> = process.env,
  run: TrainPpoRunOptions = {},
): Promise<RunSummary> {
  const o = resolveOptions(parseTrainPpoFlags(argv, env));
  const log = run.log ?? defaultLog;
  const place = run.roles ?? (o.inProcess ? inProcessRoles : await remotePlacement());
  const mode = o.asyncTrain ? `async (queue ${o.asyncQueueSize}, ${o.asyncNumTasks} tasks/engine)` : 'sync';
  log.line(
    `${mode}; ${o.rolloutNumEngines} engine(s); ${o.advantageEstimator}; ${o.rolloutBatchSize} prompts x ${o.nSamplesPerPrompt} samples per step; ` +
      `agent ${o.agentFunc ?? '<built-in math reward>'}`,
  );
  const perEpoch = o.maxSteps > 0 ? o.maxSteps : 0;
  const roles = await place(o, perEpoch);
  try {
    const ctx = await prepareRun(o, roles, log);
    if (o.asyncTrain) await asyncLoop(ctx);
    else await syncLoop(ctx);
    return await finishRun(ctx);
  } catch (err) {
    if (isRoleDied(err)) throw err.withHint(resumeHint(o));
    throw err;
  } finally {
    await roles.close();
    await metrics.flush();
  }
}

/** How to go on after a role died: the latest checkpoint and the flag that resumes from it. */
export function resumeHint(o: TrainPpoOptions): string {
  const latest = join(resolve(o.ckptPath), 'latest');
  if (!existsSync(latest)) {
    return `no checkpoint was saved (use --save-steps N to checkpoint every N steps), so the run cannot resume`;
  }
  const dir = join(resolve(o.ckptPath), readFileSync(latest, 'utf8').trim());
  return `the last checkpoint is ${dir}; run the same command with --load-checkpoint to resume from it`;
}

async function remotePlacement(): Promise<(o: TrainPpoOptions, totalSteps: number) => Promise<Roles>> {
  const { remoteRoles } = await import('./train-ppo/remote-roles.ts');
  return remoteRoles;
}

runIfMain(import.meta.url, 'train_ppo', (argv) => trainPpo(argv), trainPpoHelp);
