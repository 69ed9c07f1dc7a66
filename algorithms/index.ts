/**
 * The RL algorithms library: experience making, advantage estimators, KL, TF.js losses, packing,
 * dynamic filtering, the trajectory buffer and the staleness throttle. Pure functions over typed
 * arrays (losses over tensors); the training loops in `train-ppo/` call them.
 *
 * @module
 */
export type {
  AdvantageEstimator,
  AdvantageInputs,
  AdvantageOptions,
  AdvantageResult,
  ResolvedAdvantageOptions,
} from './advantages.ts';
export type { DynamicFilterOptions, DynamicFilterResult } from './dynamic-filter.ts';
export type { AlgorithmErrorCode, AlgorithmErrorContext } from './errors.ts';
export type {
  ExperienceModelOutputs,
  ExperienceOptions,
  ExperienceSample,
  ResolvedExperienceOptions,
  ReturnsOptions,
  TrainingBatch,
} from './experience.ts';
export type { KlController, KlEstimator, KlOptions, ResolvedKlOptions } from './kl.ts';
export type { AggregationOptions, LossAggregation } from './loss-aggregation.ts';
export type { MicroBatch, PackOptions } from './packing.ts';
export type {
  PolicyLossEvaluation,
  PolicyLossInputs,
  PolicyLossStats,
  PpoLossOptions,
  ResolvedPpoLossOptions,
} from './policy-loss.ts';
export type { PolicyLossType } from './policy-loss-types.ts';
export type { StalenessStats, StalenessThrottleOptions } from './staleness.ts';
export type { Trajectory } from './trajectory.ts';
export type {
  BatchLease,
  BufferBatch,
  BufferStats,
  TrajectoryBufferOptions,
} from './trajectory-buffer.ts';
export type { ValueLossEvaluation, ValueLossInputs, ValueLossOptions } from './value-loss.ts';

export {
  ADVANTAGE_ESTIMATORS,
  advantageDefaults,
  computeAdvantages,
  discountedReturnsRow,
  gaeRow,
  GROUP_ESTIMATORS,
  resolveAdvantageOptions,
  shapeGroupScores,
  whitenAdvantages,
} from './advantages.ts';
export { dynamicFilter, dynamicFilterDefaults } from './dynamic-filter.ts';
export { AlgorithmError } from './errors.ts';
export {
  alignTrajectory,
  computeReturns,
  experienceDefaults,
  lastActionIndex,
  makeExperience,
  overlongPenalty,
  resolveExperienceOptions,
  tokenRewards,
} from './experience.ts';
export {
  AdaptiveKlController,
  createKlController,
  FixedKlController,
  KL_CLAMP,
  KL_ESTIMATORS,
  klDefaults,
  klEstimate,
  klPerToken,
  resolveKlOptions,
} from './kl.ts';
export { aggregateLoss, LOSS_AGGREGATIONS } from './loss-aggregation.ts';
export { lossWeights, packMicroBatches, padRows } from './packing.ts';
export { POLICY_LOSS_TYPES, stopGradient } from './policy-loss-types.ts';
export {
  clippedSurrogate,
  entropyFromLogits,
  klTensor,
  policyLossStats,
  ppoActorLoss,
  ppoActorLossWithStats,
  ppoLossDefaults,
  readPolicyLossStats,
  resolvePpoLossOptions,
} from './policy-loss.ts';
export { RewardNormalizer } from './reward-normalizer.ts';
export { StalenessThrottle, stalenessStats } from './staleness.ts';
export { BufferSlot, TrajectoryBuffer } from './trajectory-buffer.ts';
export { readValueLossChecks, valueLoss, valueLossDefaults } from './value-loss.ts';
