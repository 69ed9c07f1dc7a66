/**
 * Advantage estimators: GAE, REINFORCE++ and its group-baseline variants (RLOO, GRPO, Dr.GRPO),
 * following OpenRLHF's `compute_advantages_and_returns`. Inputs are per-token rows aligned to
 * next-token logprobs (see `experience.ts`); outputs are rows of the same shape.
 *
 * @module
 */
import { AlgorithmError, invalidOption } from './errors.ts';
import {
  assertFinite,
  assertLength,
  assertSameRows,
  stripUndefined,
  type Numbers,
} from './validate.ts';

/** `--advantage-estimator` values. */
export type AdvantageEstimator =
  | 'gae'
  | 'reinforce'
  | 'reinforce_baseline'
  | 'rloo'
  | 'group_norm'
  | 'dr_grpo';

/** Every estimator name, for CLI choices. */
export const ADVANTAGE_ESTIMATORS: readonly AdvantageEstimator[] = [
  'gae',
  'reinforce',
  'reinforce_baseline',
  'rloo',
  'group_norm',
  'dr_grpo',
];

/** Estimators that compare samples of one prompt and so need `nSamplesPerPrompt > 1`. */
export const GROUP_ESTIMATORS: readonly AdvantageEstimator[] = [
  'reinforce_baseline',
  'rloo',
  'group_norm',
  'dr_grpo',
];

/** Advantage options as the trainer resolves them from flags. */
export interface AdvantageOptions {
  /** Estimator (`--advantage-estimator`). @default 'gae' */
  estimator?: AdvantageEstimator;
  /** Discount γ (`--gamma`); forced to 1 for the group estimators. @default 1 */
  gamma?: number;
  /** GAE λ (`--lambd`). @default 1 */
  lambd?: number;
  /**
   * Keep the mean subtraction but skip the division by std (`--no-advantage-std-norm`), both in
   * global whitening and in `group_norm`'s per-group normalisation. @default false
   */
  noStdNorm?: boolean;
  /** Samples per prompt (`--n-samples-per-prompt`), checked against the estimator. @default 1 */
  nSamplesPerPrompt?: number;
}

/** Defaults for {@link AdvantageOptions}. */
export const advantageDefaults: Required<AdvantageOptions> = {
  estimator: 'gae',
  gamma: 1,
  lambd: 1,
  noStdNorm: false,
  nSamplesPerPrompt: 1,
};

/** {@link AdvantageOptions} after defaults, validation and the γ = 1 rule for group estimators. */
export type ResolvedAdvantageOptions = Required<AdvantageOptions>;

/**
 * Fills defaults and validates. Errors name the flag:
 * `--n-samples-per-prompt: must be > 1 for --advantage-estimator rloo (got 1)`.
 */
export function resolveAdvantageOptions(opts: AdvantageOptions = {}): ResolvedAdvantageOptions {
  const r = { ...advantageDefaults, ...stripUndefined(opts) };
  if (!ADVANTAGE_ESTIMATORS.includes(r.estimator)) {
    throw invalidOption(
      '--advantage-estimator',
      `must be one of ${ADVANTAGE_ESTIMATORS.join(', ')} (got ${String(r.estimator)})`,
    );
  }
  if (!(Number.isFinite(r.gamma) && r.gamma >= 0 && r.gamma <= 1)) {
    throw invalidOption('--gamma', `must be in [0, 1] (got ${r.gamma})`);
  }
  if (!(Number.isFinite(r.lambd) && r.lambd >= 0 && r.lambd <= 1)) {
    throw invalidOption('--lambd', `must be in [0, 1] (got ${r.lambd})`);
  }
  if (!(Number.isInteger(r.nSamplesPerPrompt) && r.nSamplesPerPrompt >= 1)) {
    throw invalidOption(
      '--n-samples-per-prompt',
      `must be an integer >= 1 (got ${r.nSamplesPerPrompt})`,
    );
  }
  if (GROUP_ESTIMATORS.includes(r.estimator)) {
    if (r.nSamplesPerPrompt <= 1) {
      throw invalidOption(
        '--n-samples-per-prompt',
        `must be > 1 for --advantage-estimator ${r.estimator} (got ${r.nSamplesPerPrompt})`,
      );
    }
    r.gamma = 1;
  }
  return r;
}

/**
 * Group shaping of scalar scores (one per sample), grouped by `groupIds`:
 * `reinforce_baseline`/`dr_grpo`: `r − mean_g`; `rloo`: `r − (Σ_g r − r)/(n−1)`;
 * `group_norm`: `(r − mean_g)/(std_g + 1e-9)` with the unbiased std (as `torch.std`).
 * `gae` and `reinforce` return the scores unchanged. A group of one keeps its score with mean 0
 * (the verl convention), since it has nothing to compare against.
 *
 * @example
 * shapeGroupScores([1, 0, 0, 0], ['a', 'a', 'a', 'a'], 'rloo') // [1, -1/3, -1/3, -1/3]
 */
export function shapeGroupScores(
  scores: Numbers,
  groupIds: readonly string[],
  estimator: AdvantageEstimator,
  noStdNorm = false,
): Float64Array {
  assertLength(groupIds, scores.length, 'groupIds');
  assertFinite(scores, 'scores');
  const out = Float64Array.from(scores);
  if (estimator === 'gae' || estimator === 'reinforce') return out;
  const groups = new Map<string, number[]>();
  for (let i = 0; i < groupIds.length; i++) {
    const id = groupIds[i] as string;
    let g = groups.get(id);
    if (!g) groups.set(id, (g = []));
    g.push(i);
  }
  for (const members of groups.values()) {
    const n = members.length;
    if (n === 1) continue;
    let sum = 0;
    for (const i of members) sum += out[i] as number;
    const mean = sum / n;
    if (estimator === 'rloo') {
      const shaped = members.map((i) => (out[i] as number) - (sum - (out[i] as number)) / (n - 1));
      members.forEach((i, k) => (out[i] = shaped[k] as number));
    } else if (estimator === 'group_norm' && !noStdNorm) {
      let ss = 0;
      for (const i of members) ss += ((out[i] as number) - mean) ** 2;
      const std = Math.sqrt(ss / (n - 1));
      for (const i of members) out[i] = ((out[i] as number) - mean) / (std + 1e-9);
    } else {
      for (const i of members) out[i] = (out[i] as number) - mean;
    }
  }
  return out;
}

/**
 * Generalised advantage estimation over one row. Rewards and values are multiplied by the mask
 * first; then backwards `δ_t = r_t + γV_{t+1} − V_t`, `A_t = δ_t + γλA_{t+1}` (V past the end is 0),
 * and `R_t = A_t + V_t`.
 */
export function gaeRow(
  rewards: Numbers,
  values: Numbers,
  mask: Numbers,
  gamma: number,
  lambd: number,
): { advantages: Float32Array; returns: Float32Array } {
  const n = rewards.length;
  assertLength(values, n, 'values');
  assertLength(mask, n, 'mask');
  const advantages = new Float32Array(n);
  const returns = new Float32Array(n);
  let last = 0;
  for (let t = n - 1; t >= 0; t--) {
    const m = mask[t] as number;
    const v = (values[t] as number) * m;
    const next = t < n - 1 ? (values[t + 1] as number) * (mask[t + 1] as number) : 0;
    const delta = (rewards[t] as number) * m + gamma * next - v;
    last = delta + gamma * lambd * last;
    advantages[t] = last;
    returns[t] = last + v;
  }
  return { advantages, returns };
}

/** Discounted return of one row: `G_t = Σ_k γ^k r_{t+k}` over masked rewards. */
export function discountedReturnsRow(rewards: Numbers, mask: Numbers, gamma: number): Float32Array {
  assertLength(mask, rewards.length, 'mask');
  const out = new Float32Array(rewards.length);
  let g = 0;
  for (let t = rewards.length - 1; t >= 0; t--) {
    g = (rewards[t] as number) * (mask[t] as number) + gamma * g;
    out[t] = g;
  }
  return out;
}

/**
 * Global whitening over every action token of the batch: `(A − μ)·rsqrt(max(σ², 1e-8))`, with
 * μ, σ² the masked mean and population variance. `noStdNorm` keeps only `A − μ`. Returns new rows;
 * positions outside the mask are 0. A batch with no action tokens is returned as zeros.
 */
export function whitenAdvantages(
  rows: readonly Numbers[],
  masks: readonly Numbers[],
  noStdNorm = false,
): Float32Array[] {
  assertSameRows(rows, masks, 'advantages', 'masks');
  let sum = 0;
  let count = 0;
  rows.forEach((row, r) => {
    const mask = masks[r] as Numbers;
    assertLength(mask, row.length, `masks[${r}]`);
    for (let t = 0; t < row.length; t++) {
      const m = mask[t] as number;
      if (m !== 0) {
        sum += (row[t] as number) * m;
        count += m;
      }
    }
  });
  if (count === 0) return rows.map((row) => new Float32Array(row.length));
  const mean = sum / count;
  let rstd = 1;
  if (!noStdNorm) {
    let ss = 0;
    rows.forEach((row, r) => {
      const mask = masks[r] as Numbers;
      for (let t = 0; t < row.length; t++)
        ss += ((row[t] as number) - mean) ** 2 * (mask[t] as number);
    });
    rstd = 1 / Math.sqrt(Math.max(ss / count, 1e-8));
  }
  return rows.map((row, r) => {
    const mask = masks[r] as Numbers;
    const out = new Float32Array(row.length);
    for (let t = 0; t < row.length; t++)
      if ((mask[t] as number) !== 0) out[t] = ((row[t] as number) - mean) * rstd;
    return out;
  });
}

/** Per-token inputs of {@link computeAdvantages}, one row per sample. */
export interface AdvantageInputs {
  /** Per-token rewards: the (shaped, clipped) score on the last action token plus any −β·KL. */
  tokenRewards: readonly Numbers[];
  /** 1 on action tokens. */
  masks: readonly Numbers[];
  /** Critic values, required by `gae`. */
  values?: readonly Numbers[];
}

/** Advantages and returns, one row per sample; 0 outside the mask. */
export interface AdvantageResult {
  advantages: Float32Array[];
  returns: Float32Array[];
}

/**
 * Advantages and returns from per-token rewards. `gae` uses the critic's values; every other
 * estimator uses discounted returns as advantages (`A = G`, γ = 1 for group estimators, whose
 * group shaping happened before, in {@link shapeGroupScores}). Global whitening for `gae`,
 * `reinforce` and `reinforce_baseline`.
 */
export function computeAdvantages(
  inputs: AdvantageInputs,
  opts: AdvantageOptions = {},
): AdvantageResult {
  const o = resolveAdvantageOptions(opts);
  const { tokenRewards, masks } = inputs;
  assertSameRows(tokenRewards, masks, 'tokenRewards', 'masks');
  tokenRewards.forEach((row, r) => {
    assertFinite(row, `tokenRewards[${r}]`);
    assertLength(masks[r] as Numbers, row.length, `masks[${r}]`);
  });
  let advantages: Float32Array[];
  let returns: Float32Array[];
  if (o.estimator === 'gae') {
    const values = inputs.values;
    if (!values) {
      throw new AlgorithmError('SHAPE_MISMATCH', '--advantage-estimator gae needs critic values', {
        field: 'values',
        flag: '--advantage-estimator',
      });
    }
    assertSameRows(tokenRewards, values, 'tokenRewards', 'values');
    advantages = [];
    returns = [];
    tokenRewards.forEach((row, r) => {
      const v = values[r] as Numbers;
      assertFinite(v, `values[${r}]`);
      const res = gaeRow(row, v, masks[r] as Numbers, o.gamma, o.lambd);
      advantages.push(res.advantages);
      returns.push(res.returns);
    });
  } else {
    returns = tokenRewards.map((row, r) => discountedReturnsRow(row, masks[r] as Numbers, o.gamma));
    advantages = returns.map((row) => Float32Array.from(row));
  }
  if (
    o.estimator === 'gae' ||
    o.estimator === 'reinforce' ||
    o.estimator === 'reinforce_baseline'
  ) {
    advantages = whitenAdvantages(advantages, masks, o.noStdNorm);
  } else {
    advantages.forEach((row, r) => zeroOutsideMask(row, masks[r] as Numbers));
  }
  returns.forEach((row, r) => zeroOutsideMask(row, masks[r] as Numbers));
  return { advantages, returns };
}

function zeroOutsideMask(row: Float32Array, mask: Numbers): void {
  for (let t = 0; t < row.length; t++) if ((mask[t] as number) === 0) row[t] = 0;
}
