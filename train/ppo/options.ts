/**
 * From `train_ppo`'s flags to the library's option objects. Each setting keeps its flag's name
 * all the way to the function that uses it (`--loss-agg-mode` → `lossAggMode`), and its default
 * lives in the library module that defines it (`trainPpoDefaults` reads them from there).
 *
 * @module
 */
import type { CriticInit } from '../../roles/critic.ts';
import type { AdvantageOptions } from '../../algorithms/advantages.ts';
import { AlgorithmError } from '../../algorithms/errors.ts';
import { resolveExperienceOptions, type ExperienceOptions } from '../../algorithms/experience.ts';
import { resolveKlOptions, type KlOptions } from '../../algorithms/kl.ts';
import { resolvePpoLossOptions, type PpoLossOptions } from '../../algorithms/policy-loss.ts';
import { stripUndefined } from '../../algorithms/validate.ts';
import type { TrainPpoOptions } from './flags.ts';

/** The policy loss of the trainer. */
export function policyLossOptions(o: TrainPpoOptions): PpoLossOptions {
  // Unset options are left out, not sent as undefined: role options cross the wire.
  return stripUndefined({
    epsClip: o.epsClip,
    epsClipHigh: o.epsClipHigh,
    dualClip: o.dualClip,
    useDecoupledLoss: o.useDecoupledLoss,
    behavImpWeightCap: o.behavImpWeightCap,
    isCorrection: o.isCorrection,
    isThreshold: o.isThreshold,
    klLossCoef: o.useKlLoss ? o.initKlCoef : 0,
    klEstimator: o.klEstimator,
    entropyLossCoef: o.entropyLossCoef,
    lossAggMode: o.lossAggMode,
    // Dr.GRPO's constant: the longest response a generation may produce.
    lossNormConstant: o.generateMaxLen,
  });
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

/** Reward shaping when trajectories become samples. */
export function experienceOptions(o: TrainPpoOptions): ExperienceOptions {
  return stripUndefined({
    rewardClipRange: o.rewardClipRange,
    rewardBias: o.rewardBias,
    rewardScale: o.rewardScale,
    overlongBufferLen: o.overlongBufferLen,
    overlongPenaltyFactor: o.overlongPenaltyFactor,
    maxNewTokens: o.generateMaxLen,
  });
}

/** The KL coefficient's controller (fixed, or adaptive with `--kl-target`). */
export function klOptions(o: TrainPpoOptions, initKlCoef = o.initKlCoef): KlOptions {
  return stripUndefined({
    initKlCoef,
    klTarget: o.klTarget,
    klHorizon: o.klHorizon,
    useKlLoss: o.useKlLoss,
    klEstimator: o.klEstimator,
  });
}

/** The advantage estimator. */
export function advantageOptions(o: TrainPpoOptions): AdvantageOptions {
  return {
    estimator: o.advantageEstimator,
    gamma: o.gamma,
    lambd: o.lambd,
    noStdNorm: o.noAdvantageStdNorm,
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
    return undefined;
  } catch (err) {
    if (err instanceof AlgorithmError && err.code === 'INVALID_OPTION')
      return { flag: err.context.flag ?? '', message: err.message };
    throw err;
  }
}
