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
import { resumeAdvice, resumeCommand } from '../../runtime/format.ts';
import { metrics, type JobReport } from '../../ops/metrics.ts';
import { asyncLoop } from './async-loop.ts';
import { trainPpoCharts, trainPpoRoles, trainPpoSummary } from './charts.ts';
import { isRoleDied } from './errors.ts';
import { runIfMain } from '../driver-flags.ts';
import { FlagError, flagConfig, parseTrainPpoArgs, trainPpoHelp } from './flags.ts';
import type { TrainPpoOptions } from './options.ts';
import { engineLabel, inProcessRoles, type Roles } from './roles.ts';
import { compileRunConfig, type RunConfig } from './run-config.ts';
import { finishRun, latestCheckpoint, prepareRun, runSteps } from './context.ts';
import { loadPromptData, promptDataOptions } from './data.ts';
import type { RunContext, RunLog, RunSummary } from './run-state.ts';
import { syncLoop } from './sync-loop.ts';
import { runName } from '../run-name.ts';
import { openTrackers, type Trackers } from '../trackers/index.ts';
import { resolvePpoHubFlags } from '../checkpoint-flags.ts';
import { checkTrainPpoPaths, defaultPretrain, pretrainDir } from './paths.ts';
import { closeLedger, openLedger } from './ledger-run.ts';
import { autoResume, onNotice, Preempt } from './preempt.ts';

export {
  parseTrainPpoArgs,
  parseTrainPpoFlags,
  trainPpoDefaults,
  trainPpoHelp,
  FlagError,
} from './flags.ts';
export type { TrainPpoOptions } from './options.ts';
export { compileRunConfig, type RunConfig } from './run-config.ts';
export type { RunSummary } from './run-state.ts';
export { RoleDiedError, isRoleDied } from './errors.ts';
export { runName } from '../run-name.ts';

export { defaultPretrain, shippedModels } from './paths.ts';

/** Options of {@link trainPpo} beyond the flags. */
export interface TrainPpoRunOptions {
  /** Where progress and metrics go. @default stdout lines + the head's metrics API */
  log?: RunLog;
  /** Places the roles; @default through the runtime, or in this process with `--in-process` */
  roles?: (config: RunConfig) => Promise<Roles>;
  /** How often W&B and MLflow are sent what was logged. @default 2000 */
  trackerFlushIntervalMs?: number;
  /**
   * Aborted when the run is being stopped (SIGTERM from `rtjob stop-job`, Ctrl-C): the run's log
   * then says which step its checkpoint holds and the command that resumes from it.
   */
  signal?: AbortSignal;
  /** Saves a checkpoint on a preemption notice (`preempt.ts`); none when absent. */
  preempt?: Preempt;
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
  autoResume(r, env);
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
  checkTrainPpoPaths(r);
  return r;
}

const defaultLog: RunLog = {
  metric: (step, values) => metrics.log(step, values),
  samples: (step, samples) => metrics.samples(step, samples),
  report: (fields) => metrics.report(fields),
  ledger: (entries) => metrics.ledger(entries),
  line: (text) => process.stdout.write(`[train_ppo] ${text}\n`),
};

/**
 * Runs `train_ppo` with command-line flags; resolves with the summary. Hub ids in checkpoint and dataset
 * flags are pinned to one commit here, once, before any role starts.
 *
 * @example
 * const summary = await trainPpo(['--agent-func', './examples/agent.ts', '--max-steps', '20']);
 */
export async function trainPpo(
  argv: readonly string[],
  env: Record<string, string | undefined> = process.env,
  run: TrainPpoRunOptions = {},
): Promise<RunSummary> {
  // The one parse of this process: nothing below parses argv again.
  const args = parseTrainPpoArgs(argv, env);
  const pinned = await resolvePpoHubFlags(args.options, env);
  const o = resolveOptions(pinned, env);
  const place = run.roles ?? (o.inProcess ? inProcessRoles : await remotePlacement());
  const config = flagConfig(o, args.given, env);
  const baseLog = run.log ?? defaultLog;
  const trackers = openTrackers(o, {
    program: 'train_ppo',
    warn: (line) => baseLog.line(line),
    defaultRunName: runName(env),
    settings: config.map((r) => ({ name: r.name.slice(2), value: r.value })),
    env,
    genAi: { model: o.pretrain, engine: o.engine },
    ...(run.trackerFlushIntervalMs !== undefined
      ? { flushIntervalMs: run.trackerFlushIntervalMs }
      : {}),
  });
  const log = withTrackers(baseLog, trackers);
  // A new run in the place of an old one: the old checkpoints go, so `latest` is never the old run's.
  if (o.overwrite && !o.loadCheckpoint)
    rmSync(resolve(o.ckptPath), { recursive: true, force: true });
  const mode = o.asyncTrain
    ? `async (queue ${o.asyncQueueSize}, ${o.asyncNumTasks} tasks/engine)`
    : 'sync';
  const engine = engineLabel(o);
  log.line(
    `${mode}; ${o.rolloutNumEngines} ${engine} engine(s); ${o.advantageEstimator}; ${o.rolloutBatchSize} prompts x ${o.nSamplesPerPrompt} samples per step; ` +
      `agent ${o.agentFunc ?? (o.remoteRmUrl ? `<remote reward ${o.remoteRmUrl}>` : '<built-in math reward>')}`,
  );
  log.report?.({
    config,
    headline: o.evalDataset ? 'eval_accuracy' : 'reward_mean',
    charts: trainPpoCharts,
    summary: trainPpoSummary,
    roles: trainPpoRoles,
    // Its samples' score (the head filters by it) is each episode's reward.
    samples: { score: 'reward' },
    // Room for the save on notice before a stop's SIGKILL (`rtjob stop-job`).
    stopGraceMs: (o.preemptSaveS + 5) * 1000,
    // Checkpoints only where the run writes them (--save-steps N).
    outputs: {
      policy: resolve(o.savePath),
      ...(o.saveSteps > 0 ? { checkpoints: resolve(o.ckptPath) } : {}),
    },
  });
  // The roles' learning-rate schedules span the run, so its length is known before they start.
  // The prompt data, read once: its size gives the run's length when --max-steps is -1.
  const records = await loadPromptData(o.promptData, '--prompt-data', promptDataOptions(o));
  const steps = runSteps(o, records.length);
  // The run's config, compiled once from the parse: the roles and the loops read it.
  const runConfig = compileRunConfig(o, steps, args);
  for (const t of trackers.list) if (t.where()) log.line(`${t.kind}: ${t.where()}`);
  let outcome: 'finished' | 'failed' = 'failed';
  const roles = await place(runConfig).catch(async (err: unknown) => {
    await trackers.close(outcome);
    throw err;
  });
  // Which backend, device and precision each role computes on, as its ready() reported it.
  if (roles.backends) {
    log.line(`roles: ${roles.backends}`);
    // The same, in the job's Config tab (and its config diff against other runs).
    log.report?.({ config: [...config, ...roleConfigRows(roles.backends)] });
  }
  let stepsDone = 0;
  let current: RunContext | undefined;
  const onStop = (): void => {
    const step = current?.stepsDone ?? stepsDone;
    log.line(`stopped at step ${step}; ${resumeHint(o, step)}`);
    const checkpoint = latestCheckpoint(o.ckptPath);
    if (checkpoint)
      log.line(`resume: ${resumeCommand(['train_ppo', ...argv], checkpoint.resumeFlags)}`);
  };
  run.signal?.addEventListener('abort', onStop, { once: true });
  try {
    const ctx = await prepareRun(runConfig, roles, log, records);
    current = ctx;
    stepsDone = ctx.state.step;
    ctx.stepsDone = stepsDone;
    const summary = await runPrepared(ctx, run.preempt);
    if (!ctx.stopRequested) outcome = 'finished';
    return summary;
  } catch (err) {
    if (isRoleDied(err)) throw err.withHint(resumeHint(o, current?.state.step ?? stepsDone));
    throw err;
  } finally {
    run.signal?.removeEventListener('abort', onStop);
    if (current && !run.preempt?.noticed) closeLedger(current);
    await roles.close();
    await trackers.close(outcome);
    for (const t of trackers.list)
      if (t.kind !== 'tensorboard' && t.where()) log.line(`${t.kind}: ${t.where()}`);
    await metrics.flush();
  }
}

/**
 * Runs a prepared run's loop and its end (the final save and summary), its episodes booked in its
 * ledger; a notice (`preempt.ts`) ends it with the save on notice instead.
 */
async function runPrepared(ctx: RunContext, preempt: Preempt | undefined): Promise<RunSummary> {
  openLedger(ctx);
  preempt?.attach(ctx);
  ctx.log.report?.({ totalSteps: ctx.config.totalSteps });
  await (ctx.o.asyncTrain ? asyncLoop(ctx) : syncLoop(ctx));
  if (ctx.stopRequested && preempt) return onNotice(preempt, ctx);
  const end = finishRun(ctx);
  preempt?.finish(end);
  return end;
}

/**
 * The `roles:` line (`trainer wasm (…); rollout-0 builtin engine on wasm (…)`) as Config rows,
 * one per role, found by the run as it started.
 */
export function roleConfigRows(backends: string): NonNullable<JobReport['config']> {
  return backends.split('; ').map((part) => {
    const at = part.indexOf(' ');
    return {
      name: part.slice(0, at < 0 ? undefined : at),
      value: at < 0 ? '' : part.slice(at + 1),
      source: 'run',
      section: 'Roles: backend, device and precision (as they started)',
    };
  });
}

/** `log` that also sends every step's metrics to the run's trackers. */
function withTrackers(log: RunLog, trackers: Trackers): RunLog {
  if (trackers.list.length === 0) return log;
  return {
    ...log,
    metric(step, values) {
      log.metric(step, values);
      trackers.log(step, values);
    },
  };
}

/**
 * `train_ppo` as a job's driver. A SIGTERM (`rtjob stop-job`, a preemption) or SIGUSR1 (Slurm's
 * `--signal=B:USR1@N`) saves a checkpoint of the last finished step within `--preempt-save-s`
 * (`preempt.ts`); then, as on Ctrl-C, the run logs where it can resume from, sends the metrics
 * still buffered, and ends the process (the runtime stops the roles).
 */
async function main(argv: string[]): Promise<RunSummary> {
  const stop = new AbortController();
  const preempt = new Preempt();
  const onSignal = (signal: NodeJS.Signals): void => {
    const code = signal === 'SIGINT' ? 130 : signal === 'SIGUSR1' ? 138 : 143;
    const saved = signal === 'SIGINT' ? Promise.resolve() : preempt.notice(signal);
    void saved
      .then(() => {
        stop.abort();
        // Within the runtime's grace before its SIGKILL.
        return Promise.race([metrics.flush(), new Promise((r) => setTimeout(r, 1000))]);
      })
      .finally(() => process.exit(code));
  };
  const signals = ['SIGTERM', 'SIGUSR1', 'SIGINT'] as const;
  for (const s of signals) process.once(s, onSignal);
  try {
    const summary = await trainPpo(argv, process.env, { signal: stop.signal, preempt });
    // Stopped by a notice: its handler ends the process once the metrics are sent.
    if (preempt.noticed) await new Promise(() => {});
    return summary;
  } finally {
    for (const s of signals) process.off(s, onSignal);
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

async function remotePlacement(): Promise<(config: RunConfig) => Promise<Roles>> {
  const { remoteRoles } = await import('./remote-roles.ts');
  return remoteRoles;
}

runIfMain(import.meta.url, 'train_ppo', main, trainPpoHelp);
