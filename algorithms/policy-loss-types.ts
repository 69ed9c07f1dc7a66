/**
 * The per-token surrogates behind `--policy-loss-type`: PPO's clip, GSPO's sequence-level ratio,
 * CISPO's clipped stop-gradient IS weight and SAPO's soft gate. Each returns the per-token loss
 * (before the behaviour weight and aggregation of `policy-loss.ts`) with the indicators its
 * statistics count. Formulas and papers: `algorithms/README.md`.
 *
 * @module
 */
import * as tf from '@tensorflow/tfjs';
import type { LossAggregation } from './loss-aggregation.ts';

/** What a surrogate needs of the resolved loss options. */
export interface SurrogateOptions {
  policyLossType: PolicyLossType;
  epsClip: number;
  epsClipHigh: number;
  dualClip: number | undefined;
  logRatioClamp: number;
  sapoTauPos: number;
  sapoTauNeg: number;
}

/** The per-token terms of one surrogate, shared by the loss and its statistics. */
export interface SurrogateTerms {
  /** `clamp(logπ − logπ_old, ±logRatioClamp)`, per token (for the approx-KL statistic). */
  logRatio: tf.Tensor;
  /** The per-token loss. */
  loss: tf.Tensor;
  /**
   * 1 where the token's gradient was cut or damped: PPO/GSPO the clipped term won, CISPO the IS
   * weight was clipped, SAPO the gate passed less than half the unclipped gradient.
   */
  clipped: tf.Tensor;
  /** With `--dual-clip`, 1 where a negative-advantage token hit the `c·A` bound. */
  dualBound?: tf.Tensor;
}

/**
 * The value of `x` with no gradient flowing back through it (PyTorch's `detach`). TF.js has no
 * such op; a custom gradient of zero is one.
 */
export const stopGradient: (x: tf.Tensor) => tf.Tensor = tf.customGrad(((
  x: tf.Tensor,
  _save: tf.GradSaveFunc,
) => ({
  value: tf.clone(x),
  gradFunc: (dy: tf.Tensor) => tf.zerosLike(dy),
})) as unknown as Parameters<typeof tf.customGrad>[0]) as unknown as (x: tf.Tensor) => tf.Tensor;

/** `[T]` inputs are one sequence: GSPO's row sums run over the last axis either way. */
function rowMean(x: tf.Tensor, mask: tf.Tensor): tf.Tensor {
  const n = tf.maximum(tf.sum(mask, -1, true), 1);
  return tf.div(tf.sum(tf.mul(x, mask), -1, true), n);
}

/** PPO's clipped term on a ratio (per token for PPO, per sequence for GSPO), with dual clip. */
function clipTerms(
  ratio: tf.Tensor,
  advantages: tf.Tensor,
  o: SurrogateOptions,
): Pick<SurrogateTerms, 'loss' | 'clipped' | 'dualBound'> {
  const surr1 = tf.mul(ratio, advantages);
  const surr2 = tf.mul(tf.clipByValue(ratio, 1 - o.epsClip, 1 + o.epsClipHigh), advantages);
  const clip1 = tf.minimum(surr1, surr2);
  const clipped = tf.cast(tf.less(surr2, surr1), 'float32');
  if (o.dualClip === undefined) return { loss: tf.neg(clip1), clipped };
  const neg = tf.less(advantages, 0);
  const bound = tf.mul(advantages, o.dualClip);
  const loss = tf.neg(tf.where(neg, tf.maximum(clip1, bound), clip1));
  const dualBound = tf.cast(tf.logicalAnd(neg, tf.less(clip1, bound)), 'float32');
  return { loss, clipped, dualBound };
}

type Terms = (
  logprobs: tf.Tensor,
  oldLogprobs: tf.Tensor,
  advantages: tf.Tensor,
  mask: tf.Tensor,
  o: SurrogateOptions,
  logRatio: tf.Tensor,
) => Omit<SurrogateTerms, 'logRatio'>;

/** One policy loss: its per-token terms and what it implies for the options around it. */
export interface PolicyLossSpec {
  /** One line for `--help`. */
  summary: string;
  /** The terms, given the clamped per-token log-ratio. */
  terms: Terms;
  /** The `--loss-agg-mode` it defaults to, when not given. @default 'token-mean' */
  lossAggMode?: LossAggregation;
  /** Whether `--dual-clip` applies (its clipped term bounds negative advantages). */
  dualClip: boolean;
}

/**
 * Every policy loss (`--policy-loss-type`, OpenRLHF's flag; `cispo` and `sapo` are verl's
 * `policy_loss.loss_mode` names): a new loss is one entry here (`algorithms/README.md`, "Adding
 * a policy loss").
 *
 * - `ppo`: `−min(r·A, clip(r, 1−ε_lo, 1+ε_hi)·A)`, `r = exp(logπ − logπ_old)`.
 * - `gspo` (GSPO-token): the same clip on `s_{i,t} = sg[s_i]·π/sg[π]`, whose value is the
 *   sequence ratio `s_i = exp(mean_t(logπ − logπ_old))` and whose gradient is `s_i·∇logπ_t`.
 * - `cispo`: `−sg(clip(r, 1−ε_lo, 1+ε_hi))·A·logπ`: every token keeps a gradient, scaled by the
 *   clipped weight.
 * - `sapo`: `−(4/τ)·σ(τ(r−1))·A`, τ = τ_pos for A > 0 else τ_neg; its gradient is
 *   `4σ(1−σ)·r·A·∇logπ`, equal to the plain policy gradient at r = 1 and fading smoothly away.
 */
export const policyLosses = {
  ppo: {
    summary: 'PPO clip',
    dualClip: true,
    terms: (_lp, _old, advantages, _mask, o, logRatio) =>
      clipTerms(tf.exp(logRatio), advantages, o),
  },
  gspo: {
    summary: 'sequence ratio',
    // GSPO's and SAPO's objectives average each sequence's tokens, then the sequences (verl).
    lossAggMode: 'seq-mean-token-mean',
    dualClip: true,
    terms: (logprobs, oldLogprobs, advantages, mask, o) => {
      const c = o.logRatioClamp;
      const seq = rowMean(tf.sub(logprobs, oldLogprobs), mask);
      const logS = tf.add(stopGradient(seq), tf.sub(logprobs, stopGradient(logprobs)));
      return clipTerms(tf.exp(tf.clipByValue(logS, -c, c)), advantages, o);
    },
  },
  cispo: {
    summary: 'clipped stop-gradient IS weight',
    dualClip: false,
    terms: (logprobs, _old, advantages, _mask, o, logRatio) => {
      const ratio = tf.exp(logRatio);
      const w = tf.clipByValue(ratio, 1 - o.epsClip, 1 + o.epsClipHigh);
      const loss = tf.neg(tf.mul(tf.mul(stopGradient(w), advantages), logprobs));
      return { loss, clipped: tf.cast(tf.notEqual(w, ratio), 'float32') };
    },
  },
  sapo: {
    summary: 'soft gate',
    lossAggMode: 'seq-mean-token-mean',
    dualClip: false,
    terms: (_lp, _old, advantages, _mask, o, logRatio) => {
      const ratio = tf.exp(logRatio);
      const tau = tf.where(
        tf.greater(advantages, 0),
        tf.fill(advantages.shape, o.sapoTauPos),
        tf.fill(advantages.shape, o.sapoTauNeg),
      );
      const gate = tf.sigmoid(tf.mul(tau, tf.sub(ratio, 1)));
      const loss = tf.neg(tf.mul(tf.mul(tf.div(gate, tau), 4), advantages));
      // 4σ(1−σ) is the share of the plain policy gradient (per unit r) the gate passes.
      const passed = tf.mul(tf.mul(gate, tf.sub(1, gate)), 4);
      return { loss, clipped: tf.cast(tf.less(passed, 0.5), 'float32') };
    },
  },
} satisfies Record<string, PolicyLossSpec>;

/** A policy loss's name. */
export type PolicyLossType = keyof typeof policyLosses;
/** The policy losses, in table order. */
export const POLICY_LOSS_TYPES = Object.keys(policyLosses) as PolicyLossType[];
/** Other projects' names for an entry (verl's `vanilla` is PPO's clip). */
export const policyLossAliases: Readonly<Record<string, PolicyLossType>> = { vanilla: 'ppo' };

/** The entry of `type`. */
export const policyLossSpec = (type: PolicyLossType): PolicyLossSpec => policyLosses[type];

/** The per-token surrogate of `o.policyLossType`, differentiable in `logprobs` only. */
export function surrogateTerms(
  logprobs: tf.Tensor,
  oldLogprobs: tf.Tensor,
  advantages: tf.Tensor,
  mask: tf.Tensor,
  o: SurrogateOptions,
): SurrogateTerms {
  const c = o.logRatioClamp;
  const logRatio = tf.clipByValue(tf.sub(logprobs, oldLogprobs), -c, c);
  const terms = policyLossSpec(o.policyLossType).terms;
  return { logRatio, ...terms(logprobs, oldLogprobs, advantages, mask, o, logRatio) };
}
