/**
 * From `train_ppo`'s flags to the library's option objects. Each setting keeps its flag's name
 * all the way to the function that uses it (`--loss-agg-mode` → `lossAggMode`), and its default
 * lives in the library module that defines it. A row of `flag-table.ts` declared for a library
 * object (`lib(['loss'], …)`) is copied into it here by name; only settings that are derived
 * (`klLossCoef` from `--use-kl-loss` and `--init-kl-coef`) or renamed are written out below.
 *
 * @module
 */
import type { CriticInit } from '../../roles/critic.ts';
import type { AdvantageOptions } from '../../algorithms/advantages.ts';
import { AlgorithmError } from '../../algorithms/errors.ts';
import { resolveExperienceOptions, type ExperienceOptions } from '../../algorithms/experience.ts';
import { resolveKlOptions, type KlOptions } from '../../algorithms/kl.ts';
import { resolvePpoLossOptions, type PpoLossOptions } from '../../algorithms/policy-loss.ts';
import { resolveDistillOptions, type DistillOptions } from '../../algorithms/distillation.ts';
import { stripUndefined } from '../../algorithms/validate.ts';
import type { LrScheduleOptions } from '../../model/lr-schedule.ts';
import { libraryKeys, type LibraryOptions, type TrainPpoOptions } from './flag-table.ts';

export type { TrainPpoOptions } from './flag-table.ts';

/**
 * The settings of `o` whose rows feed the library options `to`, under their own names: a flag
 * declared with `lib([to], key, …)` reaches that object with no line here.
 */
function libraryPart(o: TrainPpoOptions, to: LibraryOptions): Record<string, unknown> {
  return Object.fromEntries(libraryKeys(to).map((k) => [k, o[k]]));
}

/** The policy loss of the trainer. */
export function policyLossOptions(o: TrainPpoOptions): PpoLossOptions {
  // Unset options are left out, not sent as undefined: role options cross the wire.
  return stripUndefined({
    ...(libraryPart(o, 'loss') as PpoLossOptions),
    klLossCoef: o.useKlLoss ? o.initKlCoef : 0,
    // Dr.GRPO's constant: the longest response a generation may produce.
    lossNormConstant: o.generateMaxLen,
  });
}

/** On-policy distillation's weights (`algorithms/distillation.ts`). */
export function distillOptions(o: TrainPpoOptions): DistillOptions {
  return libraryPart(o, 'distill') as DistillOptions;
}

/** The critic's value loss and micro-batching. */
export function valueLossOptions(
  o: TrainPpoOptions,
): Pick<CriticInit, 'valueClip' | 'lossAggMode' | 'lossNormConstant' | 'trainMaxTokensPerGpu'> {
  return {
    valueClip: o.valueClip,
    lossAggMode: o.lossAggMode,
    lossNormConstant: o.generateMaxLen,
    ...(o.trainMaxTokensPerGpu !== undefined
      ? { trainMaxTokensPerGpu: o.trainMaxTokensPerGpu }
      : {}),
  };
}

/**
 * The learning-rate schedule of the trainer and the critic (each from its own learning rate),
 * as OpenRLHF builds it: the length is the run's optimizer steps (`steps` global steps × the
 * optimizer steps of one: ⌈samples per step / --train-batch-size⌉ × --max-epochs), the warmup
 * `⌈length × --lr-warmup-ratio⌉` of them.
 */
export function lrScheduleOptions(
  o: TrainPpoOptions,
  steps: number,
): Omit<LrScheduleOptions, 'lr'> {
  const perStep =
    Math.ceil((o.rolloutBatchSize * o.nSamplesPerPrompt) / o.trainBatchSize) * o.maxEpochs;
  const totalSteps = steps * perStep;
  return {
    scheduler: o.lrScheduler,
    warmupSteps: Math.ceil(totalSteps * o.lrWarmupRatio),
    totalSteps,
    minLrRatio: o.minLrRatio,
  };
}

/** Reward shaping when trajectories become samples. */
export function experienceOptions(o: TrainPpoOptions): ExperienceOptions {
  return stripUndefined({
    ...(libraryPart(o, 'experience') as ExperienceOptions),
    maxNewTokens: o.generateMaxLen,
  });
}

/** The KL coefficient's controller (fixed, or adaptive with `--kl-target`). */
export function klOptions(o: TrainPpoOptions, initKlCoef = o.initKlCoef): KlOptions {
  return stripUndefined({ ...(libraryPart(o, 'kl') as KlOptions), initKlCoef });
}

/** The advantage estimator. */
export function advantageOptions(o: TrainPpoOptions): AdvantageOptions {
  return {
    estimator: o.advantageEstimator,
    gamma: o.gamma,
    lambd: o.lambd,
    noStdNorm: !o.advantageStdNorm,
    nSamplesPerPrompt: o.nSamplesPerPrompt,
  };
}

/**
 * Runs every library resolver over the flags, so an out-of-range or inconsistent setting fails
 * before anything starts with the library's own message; returns the flag and message of the
 * first problem, or undefined.
 */
export function checkLibraryOptions(
  o: TrainPpoOptions,
): { flag: string; message: string } | undefined {
  try {
    resolvePpoLossOptions(policyLossOptions(o));
    resolveKlOptions(klOptions(o));
    resolveExperienceOptions(experienceOptions(o));
    resolveDistillOptions(distillOptions(o));
    return undefined;
  } catch (err) {
    if (err instanceof AlgorithmError && err.code === 'INVALID_OPTION')
      return { flag: err.context.flag ?? '', message: err.message };
    throw err;
  }
}
