/**
 * From `train_ppo`'s flags to the library's option objects. Each setting keeps its flag's name
 * all the way to the function that uses it (`--loss-agg-mode` → `lossAggMode`), and its default
 * lives in the library module that defines it (`trainPpoDefaults` reads them from there).
 * {@link TrainPpoOptions}, the resolved form of the flags, is declared here, beside the mapping;
 * `flags.ts` parses argv into it.
 *
 * @module
 */
import type { CriticInit } from '../../roles/critic.ts';
import type { AdvantageEstimator, AdvantageOptions } from '../../algorithms/advantages.ts';
import { AlgorithmError } from '../../algorithms/errors.ts';
import { resolveExperienceOptions, type ExperienceOptions } from '../../algorithms/experience.ts';
import { resolveKlOptions, type KlEstimator, type KlOptions } from '../../algorithms/kl.ts';
import type { LossAggregation } from '../../algorithms/loss-aggregation.ts';
import {
  resolvePpoLossOptions,
  type IsCorrection,
  type PpoLossOptions,
} from '../../algorithms/policy-loss.ts';
import { stripUndefined } from '../../algorithms/validate.ts';

/** Resolved options of a `train_ppo` run. */
export interface TrainPpoOptions {
  pretrain: string;
  agentFunc: string | undefined;
  promptData: string;
  inputKey: string;
  labelKey: string;
  applyChatTemplate: boolean;
  nSamplesPerPrompt: number;
  rolloutBatchSize: number;
  microRolloutBatchSize: number;
  trainBatchSize: number;
  microTrainBatchSize: number;
  maxEpochs: number;
  numEpisodes: number;
  maxSteps: number;
  promptMaxLen: number;
  generateMaxLen: number;
  temperature: number;
  topP: number;
  advantageEstimator: AdvantageEstimator;
  noAdvantageStdNorm: boolean;
  initKlCoef: number;
  useKlLoss: boolean;
  klEstimator: KlEstimator;
  klTarget: number | undefined;
  klHorizon: number;
  epsClip: number;
  epsClipHigh: number | undefined;
  dualClip: number | undefined;
  isCorrection: IsCorrection;
  isThreshold: [number, number];
  lossAggMode: LossAggregation;
  valueClip: number;
  normalizeReward: boolean;
  rewardScale: number;
  rewardBias: number;
  rewardClipRange: [number, number];
  overlongBufferLen: number | undefined;
  overlongPenaltyFactor: number;
  trainMaxTokensPerGpu: number | undefined;
  gamma: number;
  lambd: number;
  entropyLossCoef: number;
  actorLearningRate: number;
  criticLearningRate: number;
  maxNorm: number;
  /** `--gradient-checkpointing`: recompute layer activations in the backward pass. */
  gradientCheckpointing: boolean;
  /** `--packing-samples`: one packed row per micro-batch instead of padded rows. */
  packingSamples: boolean;
  dynamicFiltering: boolean;
  dynamicFilteringRewardRange: [number, number];
  seed: number;
  savePath: string;
  saveDtype: 'float32' | 'bfloat16';
  saveSteps: number;
  ckptPath: string;
  /** Replace what a previous run left in the save and checkpoint paths. */
  overwrite: boolean;
  loadCheckpoint: boolean;
  evalDataset: string;
  evalSteps: number;
  evalPrompts: number;
  loggingSteps: number;
  /** Sample episodes kept per step (best, worst, random); 0 keeps none. */
  logSamples: number;
  rolloutNumEngines: number;
  engine: 'builtin' | 'sglang' | 'vllm' | 'llamacpp';
  /** GGUF element type of `--engine llamacpp`. */
  rolloutDtype: 'f32' | 'f16' | 'bf16' | 'q8_0';
  /** Device of `--engine llamacpp`; unset: `auto` when the rollout engines get GPUs, else `off`. */
  llamacppGpu: 'off' | 'auto' | 'cuda' | 'vulkan' | undefined;
  engineUrl: string | undefined;
  /** The command that starts each rollout's own server (`{port}`, `{model}` filled in). */
  engineLaunch: string | undefined;
  engineWeightsPath: string;
  /** A rollout that does not answer a health probe in this time is restarted. */
  engineHealthTimeoutMs: number;
  /** Limit on one weight sync (trainer snapshot, push, the engine's reload). */
  weightSyncTimeoutMs: number;
  /** Nodes of the trainer's ranks: with `actorNumGpusPerNode` >= 1, nodes × GPUs ranks of one GPU each. */
  actorNumNodes: number;
  actorNumGpusPerNode: number;
  refNumGpusPerNode: number;
  criticNumNodes: number;
  criticNumGpusPerNode: number;
  rolloutNumGpusPerEngine: number;
  colocateAllModels: boolean;
  actorNumReplicas: number;
  criticNumReplicas: number;
  asyncTrain: boolean;
  asyncQueueSize: number;
  asyncNumTasks: number;
  maxHeadOffpolicyness: number | undefined;
  partialRollout: boolean;
  useDecoupledLoss: boolean;
  behavImpWeightCap: number;
  episodeTimeoutMs: number;
  agentErrorBudget: number;
  toolCallParser: string;
  gatewayCheckDrift: boolean;
  gatewayBridge: boolean;
  agentTurnDiscount: number;
  inProcess: boolean;
}

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
