/**
 * Learning-rate schedules with the names and formulas of HF transformers' `get_scheduler`, which
 * OpenRLHF's `--lr_scheduler` passes through: pure functions of the optimizer step, so a resumed
 * run that restores its step count continues the schedule where it stopped.
 *
 * @module
 */

/**
 * The learning-rate schedules of HF transformers' `get_scheduler`, which OpenRLHF's
 * `--lr_scheduler` names: `constant` (no warmup), `constant_with_warmup`, `linear` (to 0),
 * `cosine` (half a cosine to 0) and `cosine_with_min_lr` (half a cosine to `minLrRatio × lr`).
 */
export const LR_SCHEDULERS = [
  'constant',
  'constant_with_warmup',
  'linear',
  'cosine',
  'cosine_with_min_lr',
] as const;
/** One of {@link LR_SCHEDULERS}. */
export type LrScheduler = (typeof LR_SCHEDULERS)[number];

/** Learning-rate schedule settings. */
export interface LrScheduleOptions {
  /** Peak learning rate. */
  lr: number;
  /** The schedule's shape. @default 'cosine_with_min_lr' */
  scheduler?: LrScheduler;
  /** Linear warmup steps from 0 (ignored by `constant`, as in HF). @default 0 */
  warmupSteps?: number;
  /** Optimizer steps of the whole run (the decay's length); 0 means no decay after warmup. @default 0 */
  totalSteps?: number;
  /** Floor of `cosine_with_min_lr` as a fraction of `lr` (OpenRLHF's `--min_lr_ratio`). @default 0.1 */
  minLrRatio?: number;
}

/**
 * The learning rate of the optimizer step taken after `step` earlier ones (0-based), as a
 * `LambdaLR` from HF's `get_scheduler` gives it: the first warmup step has rate 0, the last
 * warmup step `lr × (w−1)/w`, then the decay runs over `totalSteps − warmupSteps` steps. Past
 * `totalSteps` the rate stays at the decay's end (HF's cosine would rise again).
 *
 * @example
 * learningRate({ lr: 1e-6, scheduler: 'cosine_with_min_lr', warmupSteps: 3, totalSteps: 100 }, 50)
 */
export function learningRate(o: LrScheduleOptions, step: number): number {
  const scheduler = o.scheduler ?? 'cosine_with_min_lr';
  if (scheduler === 'constant') return o.lr;
  const warm = o.warmupSteps ?? 0;
  if (step < warm) return (o.lr * step) / Math.max(1, warm);
  const total = o.totalSteps ?? 0;
  if (scheduler === 'constant_with_warmup' || !total) return o.lr;
  const progress = Math.min(1, (step - warm) / Math.max(1, total - warm));
  if (scheduler === 'linear') return o.lr * Math.max(0, (total - step) / Math.max(1, total - warm));
  const cosine = 0.5 * (1 + Math.cos(Math.PI * progress));
  if (scheduler === 'cosine') return o.lr * Math.max(0, cosine);
  const floor = o.minLrRatio ?? 0.1;
  return o.lr * Math.max(0, cosine * (1 - floor) + floor);
}
