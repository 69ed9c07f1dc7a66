/**
 * The actor's loss in TF.js, differentiable in the current logprobs: PPO clip (symmetric,
 * clip-higher, dual clip) or GSPO, CISPO, SAPO (`policy-loss-types.ts`), AReaL's decoupled PPO (behaviour / proximal / current logprobs with an
 * importance-weight cap), OpenRLHF's truncated importance-sampling correction, the KL loss term
 * and the entropy bonus.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import { AlgorithmError, invalidOption } from './errors.ts';
import { KL_CLAMP, type KlEstimator } from './kl.ts';
import {
  aggregateLoss,
  assertFiniteTensor,
  checkAggregation,
  type LossAggregation,
} from './loss-aggregation.ts';
import {
  POLICY_LOSS_TYPES,
  policyLossAliases,
  policyLossSpec,
  surrogateTerms,
  type PolicyLossType,
  type SurrogateTerms,
} from './policy-loss-types.ts';
import {
  resolveRolloutCorrection,
  rolloutCorrection,
  rolloutCorrectionDefaults,
  type IsCorrection,
} from './rollout-correction.ts';
import { stripUndefined } from './validate.ts';

export { IS_CORRECTIONS, type IsCorrection } from './rollout-correction.ts';

/** Options of {@link ppoActorLoss}; flags are `train_ppo`'s. */
export interface PpoLossOptions {
  /**
   * The surrogate (`--policy-loss-type`): `ppo`, `gspo`, `cispo` or `sapo`; see
   * `policy-loss-types.ts`. `gspo` and `sapo` aggregate per sequence (`seq-mean-token-mean`)
   * unless `lossAggMode` is given. @default 'ppo'
   */
  policyLossType?: PolicyLossType;
  /** SAPO's gate temperature for tokens with A > 0 (`--sapo-tau-pos`). @default 1 */
  sapoTauPos?: number;
  /** SAPO's gate temperature for tokens with A ≤ 0 (`--sapo-tau-neg`). @default 1.05 */
  sapoTauNeg?: number;
  /** Lower clip ε_lo, and ε_hi unless `epsClipHigh` is set (`--eps-clip`). @default 0.2 */
  epsClip?: number;
  /** Upper clip ε_hi for clip-higher (`--eps-clip-high`). @default epsClip */
  epsClipHigh?: number;
  /** Dual-clip constant c > 1 (`--dual-clip`); unset disables. @default undefined */
  dualClip?: number;
  /** The log-ratio is clamped to ±this before `exp`. @default 20 */
  logRatioClamp?: number;
  /**
   * Decoupled PPO (`--use-decoupled-loss`): clip against the proximal policy (`oldLogprobs`) and
   * weight each token by `π_prox/π_behav`. Needs `behaviourLogprobs`. @default false
   */
  useDecoupledLoss?: boolean;
  /** Tokens whose `π_prox/π_behav` exceeds this get weight 0 (`--behav-imp-weight-cap`). @default 5 */
  behavImpWeightCap?: number;
  /**
   * Rollout correction of the engine/trainer mismatch when not decoupled (`--is-correction`):
   * `tis` multiplies by `clamp(π_old/π_behav, lo, hi)`, `icepop` zeroes tokens whose ratio is
   * outside [lo, hi]; `seq-tis`, `seq-mis`, `geo-rs` weigh or reject whole sequences
   * (`rollout-correction.ts`). Needs `behaviourLogprobs`. @default 'none'
   */
  isCorrection?: IsCorrection;
  /** [lo, hi] of the token ratio for `tis`, `icepop` (`--is-threshold`). @default [0.5, 5] */
  isThreshold?: readonly [number, number];
  /**
   * [lo, hi] of the sequence statistic for `seq-tis`, `seq-mis`, `geo-rs` (`--is-seq-threshold`).
   * @default the preset's: [0.5, 2], or [0.999, 1.001] for geo-rs
   */
  isSeqThreshold?: readonly [number, number];
  /** β of the KL loss term when `--use-kl-loss` is on; 0 leaves it out. Needs `refLogprobs`. @default 0 */
  klLossCoef?: number;
  /** Estimator for the KL loss term (`--kl-estimator`). @default 'k1' */
  klEstimator?: KlEstimator;
  /** Entropy bonus coefficient (`--entropy-loss-coef`); 0 leaves it out. Needs `entropy`. @default 0 */
  entropyLossCoef?: number;
  /** @default 'token-mean' */
  lossAggMode?: LossAggregation;
  /** C of `seq-mean-token-sum-norm`. */
  lossNormConstant?: number;
  /** Check the constant inputs for NaN/Inf (one sync each). @default true */
  checkFinite?: boolean;
}

/** Defaults for {@link PpoLossOptions}. */
export const ppoLossDefaults = {
  policyLossType: 'ppo' as PolicyLossType,
  sapoTauPos: 1,
  sapoTauNeg: 1.05,
  epsClip: 0.2,
  epsClipHigh: undefined as number | undefined,
  dualClip: undefined as number | undefined,
  logRatioClamp: 20,
  useDecoupledLoss: false as boolean,
  behavImpWeightCap: 5,
  isCorrection: rolloutCorrectionDefaults.isCorrection,
  isThreshold: rolloutCorrectionDefaults.isThreshold,
  isSeqThreshold: undefined as readonly [number, number] | undefined,
  klLossCoef: 0,
  klEstimator: 'k1' as KlEstimator,
  entropyLossCoef: 0,
  lossAggMode: 'token-mean' as LossAggregation,
  lossNormConstant: undefined as number | undefined,
  checkFinite: true as boolean,
};

/** {@link PpoLossOptions} resolved: `epsClipHigh` and `isSeqThreshold` are always set. */
export type ResolvedPpoLossOptions = Omit<
  typeof ppoLossDefaults,
  'epsClipHigh' | 'isSeqThreshold'
> & {
  epsClipHigh: number;
  isSeqThreshold: readonly [number, number];
};

/** Fills defaults and validates; errors name the flag. */
export function resolvePpoLossOptions(opts: PpoLossOptions = {}): ResolvedPpoLossOptions {
  const m = { ...ppoLossDefaults, ...stripUndefined(opts) };
  const r: ResolvedPpoLossOptions = {
    ...m,
    ...resolveRolloutCorrection(m),
    epsClipHigh: m.epsClipHigh ?? m.epsClip,
  };
  r.policyLossType = policyLossAliases[r.policyLossType] ?? r.policyLossType;
  if (!POLICY_LOSS_TYPES.includes(r.policyLossType)) {
    throw invalidOption(
      '--policy-loss-type',
      `must be one of ${POLICY_LOSS_TYPES.join(', ')} (got ${String(r.policyLossType)})`,
    );
  }
  const spec = policyLossSpec(r.policyLossType);
  if (opts.lossAggMode === undefined) r.lossAggMode = spec.lossAggMode ?? r.lossAggMode;
  if (r.dualClip !== undefined && !spec.dualClip) {
    const takes = POLICY_LOSS_TYPES.filter((t) => policyLossSpec(t).dualClip).join(' and ');
    throw invalidOption(
      '--dual-clip',
      `applies to --policy-loss-type ${takes} (got ${r.policyLossType})`,
    );
  }
  for (const [flag, v] of [
    ['--sapo-tau-pos', r.sapoTauPos],
    ['--sapo-tau-neg', r.sapoTauNeg],
  ] as const) {
    if (!(v > 0 && Number.isFinite(v))) throw invalidOption(flag, `must be > 0 (got ${v})`);
  }
  if (!(r.epsClip >= 0 && r.epsClip < 1))
    throw invalidOption('--eps-clip', `must be in [0, 1) (got ${r.epsClip})`);
  if (!(r.epsClipHigh >= 0 && Number.isFinite(r.epsClipHigh))) {
    throw invalidOption('--eps-clip-high', `must be a finite number >= 0 (got ${r.epsClipHigh})`);
  }
  if (r.dualClip !== undefined && !(r.dualClip > 1 && Number.isFinite(r.dualClip))) {
    throw invalidOption('--dual-clip', `must be > 1 (got ${r.dualClip})`);
  }
  if (!(r.behavImpWeightCap > 1))
    throw invalidOption('--behav-imp-weight-cap', `must be > 1 (got ${r.behavImpWeightCap})`);
  if (r.useDecoupledLoss && r.isCorrection !== 'none') {
    throw invalidOption(
      '--is-correction',
      'cannot be combined with --use-decoupled-loss, which already weights by π_prox/π_behav',
    );
  }
  if (!(r.klLossCoef >= 0))
    throw invalidOption('--init-kl-coef', `must be >= 0 (got ${r.klLossCoef})`);
  if (!(r.entropyLossCoef >= 0))
    throw invalidOption('--entropy-loss-coef', `must be >= 0 (got ${r.entropyLossCoef})`);
  checkAggregation(r);
  return r;
}

/** Tensors for {@link ppoActorLoss}; all share one shape, `[B, T]` or `[T]`. */
export interface PolicyLossInputs {
  /** Current policy logprobs: the only input gradients flow through (with `entropy`). */
  logprobs: tf.Tensor;
  /** Clip anchor: PPO's old logprobs, or the proximal policy's under decoupled PPO. */
  oldLogprobs: tf.Tensor;
  advantages: tf.Tensor;
  /** 1 on action tokens. */
  mask: tf.Tensor;
  /** Logprobs of the policy that generated the tokens (engine-side). */
  behaviourLogprobs?: tf.Tensor;
  /** Reference logprobs, for the KL loss term. */
  refLogprobs?: tf.Tensor;
  /** Per-token entropy of the current policy, for the bonus. */
  entropy?: tf.Tensor;
  /** Per-token loss weights from `lossWeights` (packing); replaces local aggregation. */
  weights?: tf.Tensor;
}

/**
 * Per-token clipped surrogate loss: `−min(r·A, clip(r, 1−ε_lo, 1+ε_hi)·A)` with `r =
 * exp(clamp(logπ − logπ_old, ±20))`; with dual clip, tokens with A < 0 use
 * `−max(min(r·A, clip(r)·A), c·A)`. With `policyLossType` set, that loss's per-token term
 * instead, every token counted as an action (GSPO's sequence is the last axis).
 */
export function clippedSurrogate(
  logprobs: tf.Tensor,
  oldLogprobs: tf.Tensor,
  advantages: tf.Tensor,
  opts: PpoLossOptions = {},
): tf.Tensor {
  const o = resolvePpoLossOptions(opts);
  return tf.tidy(
    () => surrogateTerms(logprobs, oldLogprobs, advantages, tf.onesLike(advantages), o).loss,
  );
}

/**
 * Constant per-token weight on the surrogate: decoupled PPO's `π_prox/π_behav` (0 above the cap),
 * or the rollout correction of `--is-correction` (`rollout-correction.ts`). Returns undefined
 * when no weight applies.
 */
export function behaviourWeights(
  inputs: PolicyLossInputs,
  o: ResolvedPpoLossOptions,
): tf.Tensor | undefined {
  if (!o.useDecoupledLoss && o.isCorrection === 'none') return undefined;
  const behav = inputs.behaviourLogprobs;
  if (!behav) {
    const flag = o.useDecoupledLoss ? '--use-decoupled-loss' : '--is-correction';
    throw new AlgorithmError('SHAPE_MISMATCH', `${flag} needs behaviourLogprobs`, {
      field: 'behaviourLogprobs',
      flag,
    });
  }
  if (!o.useDecoupledLoss)
    return rolloutCorrection(inputs.oldLogprobs, behav, inputs.mask, o).weights;
  return tf.tidy(() => {
    const w = tf.exp(tf.sub(inputs.oldLogprobs, behav));
    return tf.where(tf.lessEqual(w, o.behavImpWeightCap), w, tf.zerosLike(w));
  });
}

/** Differentiable per-token KL estimate between current and reference logprobs, clamped to ±10. */
export function klTensor(
  logprobs: tf.Tensor,
  refLogprobs: tf.Tensor,
  estimator: KlEstimator,
): tf.Tensor {
  return tf.tidy(() => {
    const x = tf.sub(logprobs, refLogprobs);
    let k: tf.Tensor;
    if (estimator === 'k1') k = x;
    else if (estimator === 'k2') k = tf.div(tf.square(x), 2);
    else k = tf.add(tf.sub(tf.exp(tf.neg(x)), 1), x);
    return tf.clipByValue(k, -KL_CLAMP, KL_CLAMP);
  });
}

/** Per-token entropy `−Σ p·log p` over the last axis of `logits`. Differentiable. */
export function entropyFromLogits(logits: tf.Tensor): tf.Tensor {
  return tf.tidy(() => {
    const logp = tf.logSoftmax(logits, -1);
    return tf.neg(tf.sum(tf.mul(tf.exp(logp), logp), -1));
  });
}

/**
 * The actor's total loss: `agg(surrogate · w) + β·agg(KL) − c_H·agg(H)`, where `w` is the
 * behaviour weight of decoupled PPO or the IS correction. Differentiable in `logprobs` (and in
 * `entropy` if it was computed from the same logits).
 *
 * @example
 * const loss = tf.variableGrads(() => ppoActorLoss({ logprobs: policy(batch), oldLogprobs, advantages, mask }));
 */
export function ppoActorLoss(inputs: PolicyLossInputs, opts: PpoLossOptions = {}): tf.Scalar {
  const o = resolvePpoLossOptions(opts);
  if (o.checkFinite) {
    for (const field of finiteChecked) {
      const t = inputs[field];
      if (t) assertFiniteTensor(t, field);
    }
  }
  return tf.tidy(() => actorLoss(inputs, o, false).loss);
}

/** The loss of {@link ppoActorLoss} with the sums behind its {@link PolicyLossStats}. */
export interface PolicyLossEvaluation {
  loss: tf.Scalar;
  /**
   * Token sums of the statistics and, with `checkFinite`, one value per checked input that is
   * NaN when the input holds NaN or Infinity: read it with {@link readPolicyLossStats} in the
   * same sync as the loss.
   */
  sums: tf.Tensor1D;
}

/**
 * {@link ppoActorLoss} and its statistics from one forward: the ratio and surrogate terms are
 * computed once, and the finiteness checks become values in `sums` instead of a sync each, so a
 * caller reads loss, statistics and checks with one sync (a GPU or wasm round trip) per
 * micro-batch.
 *
 * @example
 * const { value, grads } = tf.variableGrads(() => {
 *   const ev = ppoActorLossWithStats(inputs, opts);
 *   sums = tf.keep(ev.sums);
 *   return ev.loss;
 * });
 * const stats = readPolicyLossStats(sums.dataSync()); // throws on non-finite inputs
 */
export function ppoActorLossWithStats(
  inputs: PolicyLossInputs,
  opts: PpoLossOptions = {},
): PolicyLossEvaluation {
  const o = resolvePpoLossOptions(opts);
  return tf.tidy(() => {
    const r = actorLoss(inputs, o, true);
    return { loss: r.loss, sums: r.sums! };
  });
}

/** Inputs whose NaN/Inf `checkFinite` refuses, in the order of their counts in `sums`. */
const finiteChecked = [
  'oldLogprobs',
  'advantages',
  'mask',
  'behaviourLogprobs',
  'refLogprobs',
] as const;
const statSums = 8;

function actorLoss(
  inputs: PolicyLossInputs,
  o: ResolvedPpoLossOptions,
  withSums: boolean,
): { loss: tf.Scalar; sums?: tf.Tensor1D } {
  if (o.klLossCoef > 0 && !inputs.refLogprobs) {
    throw new AlgorithmError('SHAPE_MISMATCH', '--use-kl-loss needs refLogprobs', {
      field: 'refLogprobs',
      flag: '--use-kl-loss',
    });
  }
  if (o.entropyLossCoef > 0 && !inputs.entropy) {
    throw new AlgorithmError('SHAPE_MISMATCH', '--entropy-loss-coef > 0 needs entropy', {
      field: 'entropy',
      flag: '--entropy-loss-coef',
    });
  }
  const agg = {
    lossAggMode: o.lossAggMode,
    ...(o.lossNormConstant !== undefined ? { lossNormConstant: o.lossNormConstant } : {}),
    ...(inputs.weights ? { weights: inputs.weights } : {}),
  };
  const terms: SurrogateTerms = surrogateTerms(
    inputs.logprobs,
    inputs.oldLogprobs,
    inputs.advantages,
    inputs.mask,
    o,
  );
  const w = behaviourWeights(inputs, o);
  let loss = aggregateLoss(w ? tf.mul(terms.loss, w) : terms.loss, inputs.mask, agg);
  if (o.klLossCoef > 0) {
    const kl = klTensor(inputs.logprobs, inputs.refLogprobs as tf.Tensor, o.klEstimator);
    loss = tf.add(loss, tf.mul(aggregateLoss(kl, inputs.mask, agg), o.klLossCoef));
  }
  if (o.entropyLossCoef > 0) {
    loss = tf.sub(
      loss,
      tf.mul(aggregateLoss(inputs.entropy as tf.Tensor, inputs.mask, agg), o.entropyLossCoef),
    );
  }
  if (!withSums) return { loss: loss as tf.Scalar };
  // Statistics: computed beside the loss, never part of it, so no gradient reaches them. Terms
  // that are constant under the options (no dual clip, no behaviour weight) are not computed.
  const m = inputs.mask;
  const a = inputs.advantages;
  const zero = tf.scalar(0);
  const sum = (t: tf.Tensor): tf.Scalar => tf.sum(tf.mul(t, m));
  const n = tf.sum(m);
  let dual = zero;
  let negs = zero;
  if (terms.dualBound) {
    dual = sum(terms.dualBound);
    negs = sum(tf.cast(tf.less(a, 0), 'float32'));
  }
  // Σ t·0 is 0 when every value is finite and NaN otherwise: a finiteness check in two kernels.
  const nonFinite = (t: tf.Tensor | undefined): tf.Scalar =>
    o.checkFinite && t ? tf.sum(tf.mul(t, 0)) : zero;
  const sums = tf.stack([
    n,
    sum(terms.clipped),
    dual,
    negs,
    sum(tf.neg(terms.logRatio)),
    w ? sum(w) : n,
    w ? sum(tf.cast(tf.equal(w, 0), 'float32')) : zero,
    inputs.entropy ? sum(inputs.entropy) : zero,
    ...finiteChecked.map((f) => nonFinite(inputs[f])),
  ]) as tf.Tensor1D;
  return { loss: loss as tf.Scalar, sums };
}

/** Diagnostics of one policy-loss evaluation, over action tokens. */
export interface PolicyLossStats {
  /**
   * Share of tokens whose gradient was cut or damped: the clipped term was the active one
   * (ppo, gspo), the IS weight was clipped (cispo), the soft gate passed under half (sapo).
   */
  clipFraction: number;
  /** Share of A < 0 tokens where the dual clip bound applied. */
  dualClipFraction: number;
  /** Mean of `logπ_old − logπ` (k1 estimate of KL(old‖current)). */
  approxKl: number;
  /** Mean behaviour weight (1 when none applies). */
  behaviourWeightMean: number;
  /** Share of tokens zeroed by the weight cap or icepop. */
  behaviourWeightZeroFraction: number;
  /** Mean entropy of the current policy (0 when `entropy` was not given). */
  entropy: number;
  /** Number of action tokens. */
  tokens: number;
}

/**
 * {@link PolicyLossStats} from the `sums` of {@link ppoActorLossWithStats}, read back.
 *
 * @throws AlgorithmError `NON_FINITE_INPUT` naming the first input that held NaN or Infinity
 */
export function readPolicyLossStats(sums: ArrayLike<number>): PolicyLossStats {
  finiteChecked.forEach((field, i) => {
    if (!Number.isFinite(sums[statSums + i] ?? 0)) {
      throw new AlgorithmError(
        'NON_FINITE_INPUT',
        `${field} holds NaN or Infinity; every value must be finite`,
        { field },
      );
    }
  });
  const [n = 0, clip = 0, dual = 0, negs = 0, kl = 0, w = 0, zero = 0, ent = 0] = Array.from(
    sums,
  ).slice(0, statSums);
  const d = Math.max(n, 1);
  return {
    clipFraction: clip / d,
    dualClipFraction: negs > 0 ? dual / negs : 0,
    approxKl: kl / d,
    behaviourWeightMean: n > 0 ? w / n : 1,
    behaviourWeightZeroFraction: zero / d,
    entropy: ent / d,
    tokens: n,
  };
}

/** Computes {@link PolicyLossStats} with one sync; not differentiable, for logging. */
export function policyLossStats(
  inputs: PolicyLossInputs,
  opts: PpoLossOptions = {},
): PolicyLossStats {
  const o = { ...opts, checkFinite: false, klLossCoef: 0, entropyLossCoef: 0 };
  return readPolicyLossStats(tf.tidy(() => ppoActorLossWithStats(inputs, o).sums.dataSync()));
}
