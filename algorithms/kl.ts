/**
 * KL between the policy and the frozen reference, per token, and the coefficient β that scales it
 * (fixed, or adaptive toward a target as in Ziegler et al. / OpenRLHF's `kl_controller.py`).
 *
 * @module
 */
import { invalidOption } from './errors.ts';
import { assertFinite, assertLength, stripUndefined, type Numbers } from './validate.ts';

/** `k1 = x`, `k2 = x²/2`, `k3 = e^{−x} − 1 + x`, with `x = logπ − logπ_ref`. */
export type KlEstimator = 'k1' | 'k2' | 'k3';
/** Every estimator name, for CLI choices. */
export const KL_ESTIMATORS: readonly KlEstimator[] = ['k1', 'k2', 'k3'];

/** Every estimate is clamped to ±KL_CLAMP, as the reference does. */
export const KL_CLAMP = 10;

/** KL options as the trainer resolves them from flags. */
export interface KlOptions {
  /** β, the KL coefficient (`--init-kl-coef`). 0 disables the reference model. @default 0.01 */
  initKlCoef?: number;
  /** Target KL for the adaptive controller (`--kl-target`); unset keeps β fixed. @default undefined */
  klTarget?: number;
  /** Horizon of the adaptive controller in samples (`--kl-horizon`). @default 10000 */
  klHorizon?: number;
  /** Put KL in the loss instead of the reward (`--use-kl-loss`). @default false */
  useKlLoss?: boolean;
  /** Estimator (`--kl-estimator`). k1 suits the reward penalty, k2/k3 the loss. @default 'k1' */
  klEstimator?: KlEstimator;
}

/** Defaults for {@link KlOptions}. */
export const klDefaults = {
  initKlCoef: 0.01,
  klTarget: undefined as number | undefined,
  klHorizon: 10000,
  useKlLoss: false as boolean,
  klEstimator: 'k1' as KlEstimator,
};

/** {@link KlOptions} with defaults filled in and checked. */
export type ResolvedKlOptions = typeof klDefaults;

/** Fills defaults and validates; errors name the flag. */
export function resolveKlOptions(opts: KlOptions = {}): ResolvedKlOptions {
  const r: ResolvedKlOptions = { ...klDefaults, ...stripUndefined(opts) };
  if (!Number.isFinite(r.initKlCoef) || r.initKlCoef < 0) {
    throw invalidOption('--init-kl-coef', `must be a finite number >= 0 (got ${r.initKlCoef})`);
  }
  if (r.klTarget !== undefined && !(Number.isFinite(r.klTarget) && r.klTarget > 0)) {
    throw invalidOption('--kl-target', `must be a finite number > 0 (got ${r.klTarget})`);
  }
  if (!(Number.isFinite(r.klHorizon) && r.klHorizon > 0)) {
    throw invalidOption('--kl-horizon', `must be a finite number > 0 (got ${r.klHorizon})`);
  }
  if (!KL_ESTIMATORS.includes(r.klEstimator)) {
    throw invalidOption(
      '--kl-estimator',
      `must be one of ${KL_ESTIMATORS.join(', ')} (got ${String(r.klEstimator)})`,
    );
  }
  return r;
}

/** One token's clamped KL estimate from `x = logπ − logπ_ref`. */
export function klEstimate(logRatio: number, estimator: KlEstimator): number {
  let k: number;
  if (estimator === 'k1') k = logRatio;
  else if (estimator === 'k2') k = (logRatio * logRatio) / 2;
  else k = Math.exp(-logRatio) - 1 + logRatio;
  return Math.min(KL_CLAMP, Math.max(-KL_CLAMP, k));
}

/**
 * Per-token KL of one sequence; 0 where `mask` is 0. All arrays have the same length.
 *
 * @example
 * klPerToken([-1, -2], [-1.5, -2], [1, 1], 'k1') // Float32Array [0.5, 0]
 */
export function klPerToken(
  logprobs: Numbers,
  refLogprobs: Numbers,
  mask: Numbers,
  estimator: KlEstimator = 'k1',
): Float32Array {
  assertLength(refLogprobs, logprobs.length, 'refLogprobs');
  assertLength(mask, logprobs.length, 'mask');
  assertFinite(logprobs, 'logprobs');
  assertFinite(refLogprobs, 'refLogprobs');
  const out = new Float32Array(logprobs.length);
  for (let i = 0; i < out.length; i++) {
    if ((mask[i] as number) === 0) continue;
    out[i] =
      klEstimate((logprobs[i] as number) - (refLogprobs[i] as number), estimator) *
      (mask[i] as number);
  }
  return out;
}

/** The KL coefficient β; `update` is called once per rollout batch with the batch's mean KL. */
export interface KlController {
  /** Current β. */
  readonly value: number;
  /** Adjust β after a batch of `nSteps` samples whose mean per-sequence KL was `currentKl`. */
  update(currentKl: number, nSteps: number): void;
}

/** β never changes. */
export class FixedKlController implements KlController {
  constructor(readonly value: number) {}
  update(): void {}
}

/**
 * Adaptive β: `β ← β·(1 + clip(KL/target − 1, ±0.2)·nSteps/horizon)`, pulling the measured KL
 * toward `target`.
 */
export class AdaptiveKlController implements KlController {
  #value: number;
  constructor(
    initKlCoef: number,
    readonly target: number,
    readonly horizon: number,
  ) {
    this.#value = initKlCoef;
  }
  get value(): number {
    return this.#value;
  }
  update(currentKl: number, nSteps: number): void {
    assertFinite([currentKl, nSteps], 'klController.update(currentKl, nSteps)');
    const error = Math.min(0.2, Math.max(-0.2, currentKl / this.target - 1));
    this.#value *= 1 + (error * nSteps) / this.horizon;
  }
}

/** The controller the options ask for: adaptive when `klTarget` is set, fixed otherwise. */
export function createKlController(opts: KlOptions = {}): KlController {
  const r = resolveKlOptions(opts);
  return r.klTarget === undefined
    ? new FixedKlController(r.initKlCoef)
    : new AdaptiveKlController(r.initKlCoef, r.klTarget, r.klHorizon);
}
