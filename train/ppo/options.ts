/**
 * From `train_ppo`'s flags to the library's option objects. Each setting keeps its flag's name
 * all the way to the function that uses it (`--loss-agg-mode` → `lossAggMode`), and its default
 * lives in the library module that defines it. A row of `flag-table.ts` declared for a library
 * object (`lib(['loss'], …)`) is copied into it here by name; only settings that are derived
 * (`klLossCoef` from `--use-kl-loss` and `--init-kl-coef`) or renamed are written out below.
 * {@link libraryConfig} runs the library's resolvers over them once per process, at the parse
 * (`flags.ts`); the run carries the resolved objects to the roles (`run-config.ts`).
 *
 * @module
 */
import type { CriticInit } from '../../roles/critic.ts';
import type { ExperienceConfig } from '../../roles/experience.ts';
import { resolveAdvantageOptions, type AdvantageOptions } from '../../algorithms/advantages.ts';
import { AlgorithmError } from '../../algorithms/errors.ts';
import { resolveExperienceOptions, type ExperienceOptions } from '../../algorithms/experience.ts';
import { resolveKlOptions, type KlOptions, type ResolvedKlOptions } from '../../algorithms/kl.ts';
import {
  resolvePpoLossOptions,
  type PpoLossOptions,
  type ResolvedPpoLossOptions,
} from '../../algorithms/policy-loss.ts';
import { resolveDistillOptions, type DistillOptions } from '../../algorithms/distillation.ts';
import { stripUndefined } from '../../algorithms/validate.ts';
import type { LoraSpec } from '../../model/lora-spec.ts';
import type { LrScheduleOptions } from '../../model/lr-schedule.ts';
import { FlagError } from '../driver-flags.ts';
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

/** The critic's settings that come from the loss flags. */
export type ValueLossOptions = Pick<
  CriticInit,
  'valueClip' | 'lossAggMode' | 'lossNormConstant' | 'trainMaxTokensPerGpu'
>;

/** The critic's value loss and micro-batching. */
export function valueLossOptions(o: TrainPpoOptions): ValueLossOptions {
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
 * The library's option objects of a run, each resolved once (defaults filled, checked) from the
 * flags: what the roles and the driver's KL controller take as they are.
 */
export interface LibraryConfig {
  /** The trainer's policy loss. */
  loss: ResolvedPpoLossOptions;
  /** The driver's KL controller; its starting β is `--init-kl-coef` (or a checkpoint's). */
  kl: ResolvedKlOptions;
  /** How the trainer and the critic make experience: the same object for both. */
  experience: ExperienceConfig;
  /** The critic's value loss and micro-batching. */
  value: ValueLossOptions;
  /**
   * The policy's LoRA adapter (`--lora-rank`, `--load-lora`; `train/lora-flags.ts`), or
   * undefined for full fine-tuning; the critic trains a fresh one of the same rank and targets.
   */
  lora: LoraSpec | undefined;
}

/**
 * Runs every library resolver over the flags, once: an out-of-range or inconsistent setting
 * fails before anything starts, with the library's own message and the flag it names.
 *
 * @throws FlagError naming the flag the library's check names
 */
export function libraryConfig(o: TrainPpoOptions, lora: LoraSpec | undefined): LibraryConfig {
  try {
    return {
      // Unset options are left out, not sent as undefined: role options cross the wire.
      loss: stripUndefined(resolvePpoLossOptions(policyLossOptions(o))) as ResolvedPpoLossOptions,
      kl: resolveKlOptions(klOptions(o)),
      experience: {
        experience: resolveExperienceOptions(experienceOptions(o)),
        returns: {
          advantage: resolveAdvantageOptions(advantageOptions(o)),
          klEstimator: o.klEstimator,
          useKlLoss: o.useKlLoss,
          rewardClipRange: o.rewardClipRange,
        },
        // Checked whether or not a teacher is given: the flags' rule names --teacher-pretrain.
        ...withDistill(o, resolveDistillOptions(distillOptions(o))),
        // The trainer's own logprobs before this update: decoupled PPO's proximal policy, or the
        // "old" policy the IS correction compares with the engine's behaviour logprobs.
        recompute: o.useDecoupledLoss || o.isCorrection !== 'none',
      },
      value: valueLossOptions(o),
      lora,
    };
  } catch (err) {
    if (err instanceof AlgorithmError && err.code === 'INVALID_OPTION')
      throw new FlagError(err.context.flag ?? '', err.message);
    throw err;
  }
}

const withDistill = (o: TrainPpoOptions, distill: Required<DistillOptions>) =>
  o.teacherPretrain ? { distill } : {};
