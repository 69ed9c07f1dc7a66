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
import { resolveDistillOptions, type DistillOptions } from '../../algorithms/distillation.ts';
import type { PolicyLossType } from '../../algorithms/policy-loss-types.ts';
import { stripUndefined } from '../../algorithms/validate.ts';
import type { TrackerOptions } from '../trackers/index.ts';
import type { LrScheduleOptions, LrScheduler } from '../../model/lr-schedule.ts';
import type { LoraFlagOptions } from '../lora-flags.ts';

/**
 * Resolved options of a `train_ppo` run (the tracker flags are `train/trackers/`'s, the LoRA flags
 * `train/lora-flags.ts`'s).
 */
export interface TrainPpoOptions extends TrackerOptions, LoraFlagOptions {
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
  advantageStdNorm: boolean;
  initKlCoef: number;
  useKlLoss: boolean;
  klEstimator: KlEstimator;
  klTarget: number | undefined;
  klHorizon: number;
  epsClip: number;
  epsClipHigh: number | undefined;
  dualClip: number | undefined;
  policyLossType: PolicyLossType;
  sapoTauPos: number;
  sapoTauNeg: number;
  isCorrection: IsCorrection;
  isThreshold: [number, number];
  isSeqThreshold: [number, number] | undefined;
  /** On-policy distillation's teacher (HF directory); empty: none. */
  teacherPretrain: string;
  teacherKlCoef: number;
  taskRewardCoef: number;
  /** A `train_rm` reward model whose score replaces each episode's reward; empty: none. */
  rewardPretrain: string;
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
  /** OpenRLHF's optimizer schedule and weight decay (`lrScheduleOptions`). */
  lrScheduler: LrScheduler;
  lrWarmupRatio: number;
  minLrRatio: number;
  l2: number;
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
  /** Checkpoints kept in `ckptPath` (the oldest removed), as OpenRLHF's `--max_ckpt_num`. */
  maxCkptNum: number;
  /** Also write the policy as an HF directory `ckptPath/global_step_N_hf` at every save. */
  saveHfCkpt: boolean;
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
  /** OpenRLHF's remote reward model: comma-separated URLs scoring every answer (`rewards/remote.ts`). */
  remoteRmUrl: string | undefined;
  remoteRmBatchSize: number;
  remoteRmTimeoutMs: number;
  remoteRmRetries: number;
  inProcess: boolean;
}

/** The policy loss of the trainer. */
export function policyLossOptions(o: TrainPpoOptions): PpoLossOptions {
  // Unset options are left out, not sent as undefined: role options cross the wire.
  return stripUndefined({
    epsClip: o.epsClip,
    epsClipHigh: o.epsClipHigh,
    dualClip: o.dualClip,
    policyLossType: o.policyLossType,
    sapoTauPos: o.sapoTauPos,
    sapoTauNeg: o.sapoTauNeg,
    useDecoupledLoss: o.useDecoupledLoss,
    behavImpWeightCap: o.behavImpWeightCap,
    isCorrection: o.isCorrection,
    isThreshold: o.isThreshold,
    isSeqThreshold: o.isSeqThreshold,
    klLossCoef: o.useKlLoss ? o.initKlCoef : 0,
    klEstimator: o.klEstimator,
    entropyLossCoef: o.entropyLossCoef,
    lossAggMode: o.lossAggMode,
    // Dr.GRPO's constant: the longest response a generation may produce.
    lossNormConstant: o.generateMaxLen,
  });
}

/** On-policy distillation's weights (`algorithms/distillation.ts`). */
export function distillOptions(o: TrainPpoOptions): DistillOptions {
  return { teacherKlCoef: o.teacherKlCoef, taskRewardCoef: o.taskRewardCoef };
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
