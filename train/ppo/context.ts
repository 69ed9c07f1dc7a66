/**
 * The life of one `train_ppo` run's context, shared by the sync and async loops: preparation
 * (data, resume, the first evaluation), what happens after each step (metrics, progress line,
 * evaluation, checkpoint) and the end of the run. Its types are in `run-state.ts`.
 *
 * @module
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { JobCheckpoint } from '../../ops/metrics.ts';
import type { PromptItem } from '../../roles/rollout.ts';
import { createKlController } from '../../algorithms/kl.ts';
import { RewardNormalizer } from '../../algorithms/reward-normalizer.ts';
import { evaluate } from './generate.ts';
import { checkKeys, loadPromptData, PromptSampler, type PromptRecord } from './data.ts';
import type { TrainPpoOptions } from './options.ts';
import type { Roles } from './roles.ts';
import type { RunConfig } from './run-config.ts';
import type { RunContext, RunLog, RunState, RunSummary } from './run-state.ts';
import type { UpdateStats } from './step.ts';
import { publishWeights } from './weight-sync.ts';
import { TrainPpoError } from './errors.ts';

/** The run's steps: `--max-steps`, or -1: as many full rollout batches as the episodes hold. */
export function runSteps(o: TrainPpoOptions, prompts: number): number {
  if (o.maxSteps > 0) return o.maxSteps;
  return Math.max(1, Math.floor(prompts / o.rolloutBatchSize) * o.numEpisodes);
}

/**
 * Prepares data (`records`: the `--prompt-data` the driver read), resumes from a checkpoint when
 * asked, and evaluates the starting policy.
 */
export async function prepareRun(
  config: RunConfig,
  roles: Roles,
  log: RunLog,
  records: PromptRecord[],
): Promise<RunContext> {
  const o = config.flags;
  checkKeys(records, o.inputKey, o.labelKey, '--prompt-data', o.applyChatTemplate);
  const keys = { input: o.inputKey, label: o.labelKey };
  let evalItems: PromptItem[] = [];
  if (o.evalDataset) {
    const ev = await loadPromptData(o.evalDataset, '--eval-dataset', {
      size: o.evalPrompts,
      split: o.evalSplit,
      maxSamples: o.evalPrompts,
    });
    checkKeys(ev, o.inputKey, o.labelKey, '--eval-dataset', o.applyChatTemplate);
    const s = new PromptSampler(ev, keys, 0);
    evalItems = ev.slice(0, o.evalPrompts).map((_, i) => s.item(i, `eval-${i}`));
  }
  const state: RunState = {
    step: 0,
    position: { epoch: 0, offset: 0 },
    klCoef: o.initKlCoef,
    episodes: 0,
    failed: 0,
    trainedPrompts: [],
    rolloutRestarts: 0,
    groupsRerun: 0,
  };
  const ctx: RunContext = {
    o,
    config,
    roles,
    log,
    sampler: new PromptSampler(records, keys, o.seed),
    evalItems,
    kl: createKlController(config.kl),
    ...(o.normalizeReward ? { rewardNormalizer: new RewardNormalizer() } : {}),
    state,
    started: performance.now(),
    summary: {
      steps: 0,
      minutes: 0,
      episodesFailed: 0,
      groupsDropped: 0,
      trainedPrompts: state.trainedPrompts,
      rolloutRestarts: 0,
      savePath: resolve(o.savePath),
    },
    restarts: [],
    restarting: new Map(),
  };
  if (o.loadCheckpoint) await resume(ctx);
  if (evalItems.length) {
    const acc = await evaluate(ctx);
    ctx.summary.evalBefore = acc;
    log.metric(state.step, { eval_accuracy: acc });
    log.line(
      `eval  step ${state.step}: held-out accuracy ${(acc * 100).toFixed(1)}% (${evalItems.length} prompts, greedy)`,
    );
  }
  return ctx;
}

/**
 * Books a trained update into the run state (prompts trained, β, reward statistics, summary) and
 * returns the metrics both loops log for it; each loop adds its own timings.
 */
export function recordUpdate(
  ctx: RunContext,
  kept: readonly { index: number }[],
  u: UpdateStats,
  passRate: number,
): Record<string, number> {
  const { state } = ctx;
  for (const g of kept) state.trainedPrompts.push(g.index);
  state.klCoef = ctx.kl.value;
  if (ctx.rewardNormalizer) state.rewardStats = ctx.rewardNormalizer.state();
  ctx.summary.rewardFirst ??= u.rewardMean;
  ctx.summary.rewardLast = u.rewardMean;
  return {
    reward_mean: u.rewardMean,
    kl: u.kl,
    kl_coef: u.klCoef,
    policy_loss: u.policyLoss,
    clip_fraction: u.clipFraction,
    entropy: u.entropy,
    grad_norm: u.gradNorm,
    response_length: u.responseLength,
    pass_rate: passRate,
    staleness_mean: u.staleMean,
    staleness_max: u.staleMax,
    experience_s: u.experienceMs / 1000,
    train_s: u.trainMs / 1000,
    // Inside train_s, as the trainer (rank 0) saw it; the rest is calls and moving samples.
    train_compute_s: u.timing.computeMs / 1000,
    train_imbalance_s: u.timing.imbalanceMs / 1000,
    allreduce_s: u.timing.allreduceMs / 1000,
    optimizer_s: u.timing.optimizerMs / 1000,
    padding_fraction: u.paddingFraction,
    samples: u.samples,
    episodes_failed: state.failed,
    groups_dropped: state.groupsDropped ?? 0,
    rollout_restarts: state.rolloutRestarts,
    ...(u.valueLoss !== undefined ? { value_loss: u.valueLoss } : {}),
    // The rate of each role's last optimizer step (OpenRLHF's names).
    actor_lr: u.lr,
    ...(u.criticLr !== undefined ? { critic_lr: u.criticLr } : {}),
    ...u.mismatch,
    ...(u.opdReverseKl !== undefined ? { opd_reverse_kl: u.opdReverseKl } : {}),
    ...(u.rmScoreMean !== undefined ? { rm_score_mean: u.rmScoreMean } : {}),
  };
}

/** Logging, evaluation and checkpointing after a step. */
export async function afterStep(ctx: RunContext, values: Record<string, number>): Promise<void> {
  const { o, state, log } = ctx;
  if (
    o.evalSteps > 0 &&
    state.step % o.evalSteps === 0 &&
    state.step < ctx.config.totalSteps &&
    ctx.evalItems.length
  ) {
    const e0 = performance.now();
    values.eval_accuracy = await evaluate(ctx);
    // After step_s was measured: the evaluation's own time, as the async loop logs it.
    values.eval_s = (performance.now() - e0) / 1000;
  }
  log.metric(state.step, values);
  ctx.stepsDone = state.step;
  if (state.step % o.loggingSteps === 0 || state.step === ctx.config.totalSteps) {
    const f = (k: string, d = 3): string => (values[k] === undefined ? '-' : values[k]!.toFixed(d));
    log.line(
      `step ${state.step}/${ctx.config.totalSteps}  reward ${f('reward_mean')}  kl ${f('kl', 4)}  loss ${f('policy_loss', 4)}` +
        `  len ${f('response_length', 1)}  gen ${f('generate_s', 1)}s  train ${f('train_s', 1)}s  sync ${f('weight_sync_s', 2)}s` +
        (values.eval_accuracy !== undefined
          ? `  eval ${(values.eval_accuracy * 100).toFixed(1)}%`
          : '') +
        (values.buffer_fill !== undefined
          ? `  buffer ${f('buffer_fill', 0)}  stale ${f('staleness_mean', 2)}/${f('staleness_max', 0)}`
          : ''),
    );
  }
  if (o.saveSteps > 0 && state.step % o.saveSteps === 0) {
    // A save on notice (`preempt.ts`) waits for this one instead of writing the same step.
    ctx.saving = saveCheckpoint(ctx);
    await ctx.saving;
  }
}

/** The checkpoint `ckptPath/latest` names, and the flags that resume from it; none without one. */
export function latestCheckpoint(ckptPath: string): JobCheckpoint | undefined {
  const latest = join(resolve(ckptPath), 'latest');
  if (!existsSync(latest)) return undefined;
  const step = Number(/^global_step_(\d+)$/.exec(readFileSync(latest, 'utf8').trim())?.[1]);
  if (!Number.isInteger(step)) return undefined;
  return { step, resumeFlags: `--ckpt-path ${resolve(ckptPath)} --load-checkpoint` };
}

/**
 * Writes `ckpt_path/global_step_N` (weights, optimizer, data position, step, KL coef) and
 * `latest`, removes the oldest beyond `--max-ckpt-num`, and with `--save-hf-ckpt` writes the
 * policy as an HF directory `global_step_N_hf` beside it (kept, as in OpenRLHF).
 */
export async function saveCheckpoint(ctx: RunContext): Promise<string> {
  const root = resolve(ctx.o.ckptPath);
  const dir = join(root, `global_step_${ctx.state.step}`);
  mkdirSync(root, { recursive: true });
  await ctx.roles.trainer.saveCheckpoint(dir, { driver: ctx.state });
  // After the trainer, which replaces `dir` whole.
  if (ctx.roles.critic) await ctx.roles.critic.saveCheckpoint(join(dir, 'critic'));
  writeFileSync(join(root, 'latest'), `global_step_${ctx.state.step}\n`);
  ctx.log.line(`ckpt  step ${ctx.state.step} -> ${dir}`);
  if (ctx.o.saveHfCkpt) {
    await ctx.roles.trainer.saveHf(`${dir}_hf`);
    ctx.log.line(`ckpt  step ${ctx.state.step} HF policy -> ${dir}_hf`);
  }
  const old = checkpointSteps(root).slice(0, -ctx.o.maxCkptNum);
  for (const step of old)
    rmSync(join(root, `global_step_${step}`), { recursive: true, force: true });
  ctx.log.report?.({ checkpoint: latestCheckpoint(ctx.o.ckptPath) });
  return dir;
}

/** The steps of the resumable checkpoints in `root`, oldest first. */
export function checkpointSteps(root: string): number[] {
  if (!existsSync(root)) return [];
  return readdirSync(root)
    .map((d) => /^global_step_(\d+)$/.exec(d)?.[1])
    .filter((m): m is string => m !== undefined)
    .map(Number)
    .sort((a, b) => a - b);
}

async function resume(ctx: RunContext): Promise<void> {
  const root = resolve(ctx.o.ckptPath);
  const latest = join(root, 'latest');
  if (!existsSync(latest)) {
    ctx.log.line(`ckpt  --load-checkpoint: nothing in ${root}; starting fresh`);
    return;
  }
  const dir = join(root, readFileSync(latest, 'utf8').trim());
  const saved = (await ctx.roles.trainer.loadCheckpoint(dir)) as { driver?: RunState };
  if (!saved.driver)
    throw new TrainPpoError('TRAIN_PPO_CHECKPOINT', `checkpoint ${dir} has no driver state`);
  if (ctx.roles.critic) {
    if (!existsSync(join(dir, 'critic')))
      throw new TrainPpoError(
        'TRAIN_PPO_CHECKPOINT',
        `checkpoint ${dir} has no critic state (saved without --advantage-estimator gae?)`,
      );
    await ctx.roles.critic.loadCheckpoint(join(dir, 'critic'));
  }
  Object.assign(ctx.state, saved.driver);
  ctx.summary.trainedPrompts = ctx.state.trainedPrompts;
  ctx.sampler.seek(saved.driver.position);
  ctx.kl = createKlController({ ...ctx.config.kl, initKlCoef: saved.driver.klCoef });
  if (ctx.rewardNormalizer) ctx.rewardNormalizer = new RewardNormalizer(saved.driver.rewardStats);
  await publishWeights(ctx);
  ctx.log.line(
    `ckpt  resumed from ${dir} at step ${ctx.state.step} (epoch ${ctx.state.position.epoch}, offset ${ctx.state.position.offset})`,
  );
}

/** Saves the final policy and returns the summary. */
export async function finishRun(ctx: RunContext): Promise<RunSummary> {
  const { o, log } = ctx;
  if (ctx.evalItems.length) {
    const acc = await evaluate(ctx);
    ctx.summary.evalAfter = acc;
    log.metric(ctx.state.step, { eval_accuracy: acc });
  }
  if (o.saveSteps > 0 && ctx.state.step % o.saveSteps !== 0) await saveCheckpoint(ctx);
  await ctx.roles.trainer.saveHf(resolve(o.savePath));
  ctx.summary.steps = ctx.state.step;
  ctx.summary.rolloutRestarts = ctx.state.rolloutRestarts;
  ctx.summary.minutes = (performance.now() - ctx.started) / 60000;
  const s = ctx.summary;
  const pct = (x: number | undefined): string =>
    x === undefined ? '-' : `${(x * 100).toFixed(1)}%`;
  const heldOut =
    s.evalBefore === undefined && s.evalAfter === undefined
      ? 'no held-out eval'
      : `held-out accuracy ${pct(s.evalBefore)} -> ${pct(s.evalAfter)}`;
  log.line(
    `done  ${s.steps} steps in ${s.minutes.toFixed(1)} min; ${heldOut}; ` +
      `reward ${s.rewardFirst?.toFixed(3) ?? '-'} -> ${s.rewardLast?.toFixed(3) ?? '-'}; ${s.episodesFailed} episodes failed (${s.groupsDropped} groups dropped); policy saved to ${s.savePath}`,
  );
  return s;
}
