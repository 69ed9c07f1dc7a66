/**
 * `train_ppo`: the driver of an RL run. `rtjob submit -- train_ppo --agent-func ./agent.ts` runs
 * this file as the job's driver; `node --import tsx train/ppo/main.ts ...` runs it directly.
 *
 * It parses and validates the flags (before anything starts), places the roles (rollout engines,
 * trainer, and reference / critic when the algorithm needs them), then runs the synchronous
 * on-policy loop or, with `--async-train`, the asynchronous off-policy one.
 *
 * @module
 */
import { existsSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readEnv } from '../../runtime/env.ts';
import { resumeAdvice, resumeCommand } from '../../runtime/format.ts';
import { metrics } from '../../runtime/metrics.ts';
import { asyncLoop } from './async-loop.ts';
import { trainPpoCharts, trainPpoRoles } from './charts.ts';
import { isRoleDied } from './errors.ts';
import { runIfMain } from '../driver-flags.ts';
import { FlagError, flagConfig, parseTrainPpoFlags, trainPpoHelp } from './flags.ts';
import type { TrainPpoOptions } from './options.ts';
import { inProcessRoles, type Roles } from './roles.ts';
import { finishRun, latestCheckpoint, prepareRun, runSteps } from './context.ts';
import { loadPromptData } from './data.ts';
import type { RunLog, RunSummary } from './run-state.ts';
import { syncLoop } from './sync-loop.ts';

export { parseTrainPpoFlags, trainPpoDefaults, trainPpoHelp, FlagError } from './flags.ts';
export type { TrainPpoOptions } from './options.ts';
export type { RunSummary } from './run-state.ts';
export { RoleDiedError, isRoleDied } from './errors.ts';

/** The shipped warm-start model. */
export const defaultPretrain = fileURLToPath(
  new URL('../../model/pretrained/rtjob-tiny-math', import.meta.url),
);

/** The checkpoints the package ships, by the short name `--pretrain` accepts. */
export const shippedModels = ['rtjob-tiny-math', 'rtjob-tiny-tool'] as const;

/** `--pretrain` as given: a directory, or the short name of a shipped model. */
function pretrainDir(p: string): string {
  if (existsSync(p) || !(shippedModels as readonly string[]).includes(p)) return p;
  return fileURLToPath(new URL(`../../model/pretrained/${p}`, import.meta.url));
}

/** Options of {@link trainPpo} beyond the flags. */
export interface TrainPpoRunOptions {
  /** Where progress and metrics go. @default stdout lines + the head's metrics API */
  log?: RunLog;
  /** Places the roles; @default through the runtime, or in this process with `--in-process` */
  roles?: (o: TrainPpoOptions, totalSteps: number) => Promise<Roles>;
  /**
   * Aborted when the run is being stopped (SIGTERM from `rtjob stop-job`, Ctrl-C): the run's log
   * then says which step its checkpoint holds and the command that resumes from it.
   */
  signal?: AbortSignal;
}

/**
 * The name of this run's own output folder: the job id under a cluster, else the start time
 * (`run-20261123-203512`), so no run writes over another's policy by default.
 */
export function runName(
  env: Record<string, string | undefined> = process.env,
  now = new Date(),
): string {
  const job = readEnv('RTJOB_JOB_ID', env);
  if (job && /^[\w.-]+$/.test(job)) return job;
  const p = (n: number) => String(n).padStart(2, '0');
  return `run-${now.getFullYear()}${p(now.getMonth() + 1)}${p(now.getDate())}-${p(now.getHours())}${p(now.getMinutes())}${p(now.getSeconds())}`;
}

/** Resolves defaults that depend on the machine and checks paths, before anything starts. */
export function resolveOptions(
  o: TrainPpoOptions,
  env: Record<string, string | undefined> = process.env,
): TrainPpoOptions {
  const savePath = o.savePath || join('ckpt', runName(env));
  const r = {
    ...o,
    pretrain: o.pretrain ? pretrainDir(o.pretrain) : defaultPretrain,
    savePath,
    ckptPath: o.ckptPath || join(savePath, 'checkpoints'),
  };
  if (!r.overwrite && !r.loadCheckpoint) {
    if (existsSync(join(r.savePath, 'model.safetensors'))) {
      throw new FlagError(
        '--save-path',
        `--save-path ${r.savePath} already holds a policy from another run; pass --overwrite to replace it, or choose another --save-path`,
      );
    }
    if (existsSync(join(r.ckptPath, 'latest'))) {
      throw new FlagError(
        '--ckpt-path',
        `--ckpt-path ${r.ckptPath} holds another run's checkpoints; --load-checkpoint resumes from them, --overwrite replaces them`,
      );
    }
  }
  if (r.agentFunc && !existsSync(r.agentFunc)) {
    throw new FlagError('--agent-func', `--agent-func: no such file ${r.agentFunc}`);
  }
  if (!existsSync(r.pretrain)) {
    throw new FlagError(
      '--pretrain',
      `--pretrain: no model directory at ${r.pretrain} (a local HF-format directory: hub ids are not downloaded; shipped: ${shippedModels.join(', ')})`,
    );
  }
  return r;
}

const defaultLog: RunLog = {
  metric: (step, values) => metrics.log(step, values),
  samples: (step, samples) => metrics.samples(step, samples),
  report: (fields) => metrics.report(fields),
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
  const o = resolveOptions(parseTrainPpoFlags(argv, env), env);
  // A new run in the place of an old one: the old checkpoints go, so `latest` is never the old run's.
  if (o.overwrite && !o.loadCheckpoint)
    rmSync(resolve(o.ckptPath), { recursive: true, force: true });
  const log = run.log ?? defaultLog;
  const place = run.roles ?? (o.inProcess ? inProcessRoles : await remotePlacement());
  const mode = o.asyncTrain
    ? `async (queue ${o.asyncQueueSize}, ${o.asyncNumTasks} tasks/engine)`
    : 'sync';
  const engine = o.engine === 'llamacpp' ? `llamacpp ${o.rolloutDtype}` : o.engine;
  log.line(
    `${mode}; ${o.rolloutNumEngines} ${engine} engine(s); ${o.advantageEstimator}; ${o.rolloutBatchSize} prompts x ${o.nSamplesPerPrompt} samples per step; ` +
      `agent ${o.agentFunc ?? (o.remoteRmUrl ? `<remote reward ${o.remoteRmUrl}>` : '<built-in math reward>')}`,
  );
  log.report?.({
    config: flagConfig(o, argv, env),
    headline: o.evalDataset ? 'eval_accuracy' : 'reward_mean',
    charts: trainPpoCharts,
    roles: trainPpoRoles,
    outputs: { policy: resolve(o.savePath), checkpoints: resolve(o.ckptPath) },
  });
  // The roles' learning-rate schedules span the run, so its length is known before they start.
  const steps =
    o.maxSteps > 0 ? o.maxSteps : runSteps(o, loadPromptData(o.promptData, '--prompt-data').length);
  const roles = await place(o, steps);
  let stepsDone = 0;
  let current: { state: { step: number } } | undefined;
  const onStop = (): void => {
    const step = current?.state.step ?? stepsDone;
    log.line(`stopped at step ${step}; ${resumeHint(o, step)}`);
    const checkpoint = latestCheckpoint(o.ckptPath);
    if (checkpoint)
      log.line(`resume: ${resumeCommand(['train_ppo', ...argv], checkpoint.resumeFlags)}`);
  };
  run.signal?.addEventListener('abort', onStop, { once: true });
  try {
    const ctx = await prepareRun(o, roles, log);
    current = ctx;
    stepsDone = ctx.state.step;
    log.report?.({ totalSteps: ctx.totalSteps });
    const done = o.asyncTrain ? asyncLoop(ctx) : syncLoop(ctx);
    await done.finally(() => (stepsDone = ctx.state.step));
    return await finishRun(ctx);
  } catch (err) {
    if (isRoleDied(err)) throw err.withHint(resumeHint(o, stepsDone));
    throw err;
  } finally {
    run.signal?.removeEventListener('abort', onStop);
    await roles.close();
    await metrics.flush();
  }
}

/**
 * `train_ppo` as a job's driver: a SIGTERM (`rtjob stop-job`) or Ctrl-C logs where the run can
 * resume from, sends the metrics still buffered, and ends the process (the runtime stops the
 * roles).
 */
async function main(argv: string[]): Promise<RunSummary> {
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals): void => {
    stop.abort();
    const code = signal === 'SIGINT' ? 130 : 143;
    // Within the runtime's grace before its SIGKILL.
    void Promise.race([metrics.flush(), new Promise((r) => setTimeout(r, 1000))]).finally(() =>
      process.exit(code),
    );
  };
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  try {
    return await trainPpo(argv, process.env, { signal: stop.signal });
  } finally {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  }
}

/**
 * How to go on after a role died, from what is on disk: the latest checkpoint and the exact flags
 * that resume a new run from it, or, with none, how many steps are lost.
 */
export function resumeHint(o: TrainPpoOptions, stepsDone: number): string {
  const checkpoint = latestCheckpoint(o.ckptPath);
  const advice = resumeAdvice(checkpoint, stepsDone);
  return checkpoint ? advice : `${advice} (--save-steps N saves a checkpoint every N steps)`;
}

async function remotePlacement(): Promise<
  (o: TrainPpoOptions, totalSteps: number) => Promise<Roles>
> {
  const { remoteRoles } = await import('./remote-roles.ts');
  return remoteRoles;
}

runIfMain(import.meta.url, 'train_ppo', main, trainPpoHelp);
