/**
 * Staleness: how many policy versions behind the trainer each generated token is, and AReaL's
 * throttle that bounds it by admitting new episodes only while
 * `capacity = min(conc − running, (η + version + 1)·B − (accepted + running)) > 0`.
 *
 * @module
 */
import { AlgorithmError, invalidOption } from './errors.ts';

/** Per-token staleness of a batch: `currentVersion − version` over generated tokens. */
export interface StalenessStats {
  /** Generated tokens counted. */
  tokens: number;
  /** Mean staleness (0 when there are no tokens). */
  mean: number;
  min: number;
  max: number;
  /** Token count per staleness value. */
  histogram: Record<number, number>;
}

/**
 * Staleness of every generated (loss-masked) token against the trainer's `currentVersion`: of
 * trajectories, or of experience rows (`{ lossMask: actionMask, versions }`).
 *
 * @example
 * stalenessStats([{ ...t, lossMask: [0, 1, 1], versions: [-1, 2, 3] }], 4) // mean 1.5, max 2
 */
export function stalenessStats(
  trajectories: readonly { lossMask: ArrayLike<number>; versions: ArrayLike<number> }[],
  currentVersion: number,
): StalenessStats {
  let tokens = 0;
  let sum = 0;
  let min = Infinity;
  let max = -Infinity;
  const histogram: Record<number, number> = {};
  for (const t of trajectories) {
    for (let i = 0; i < t.lossMask.length; i++) {
      if (!t.lossMask[i]) continue;
      const v = t.versions[i];
      if (v === undefined || v < 0) continue;
      const s = currentVersion - v;
      tokens++;
      sum += s;
      if (s < min) min = s;
      if (s > max) max = s;
      histogram[s] = (histogram[s] ?? 0) + 1;
    }
  }
  return tokens === 0
    ? { tokens: 0, mean: 0, min: 0, max: 0, histogram }
    : { tokens, mean: sum / tokens, min, max, histogram };
}

interface Waiter {
  resolve: () => void;
  reject: (e: unknown) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

/** Options of {@link StalenessThrottle}; names follow AReaL's `InferenceEngineConfig`. */
export interface StalenessThrottleOptions {
  /** Training batch size in episodes (`consumer_batch_size`). */
  consumerBatchSize: number;
  /** Episodes in flight at most (`max_concurrent_rollouts`). @default consumerBatchSize */
  maxConcurrentRollouts?: number;
  /** η, versions an episode may lag (`--max-head-offpolicyness`); 0 is synchronous. @default 0 */
  maxHeadOffpolicyness?: number;
  /** Data-parallel ranks sharing the budgets. @default 1 */
  dpWorldSize?: number;
}

/**
 * Admission control for new episodes. Call {@link tryAdmit} (or await {@link admit}) before
 * starting one, {@link finish} when it ends, and {@link setVersion} after each weight update.
 * At most `(η + v + 1)·B` episodes are ever started before version `v + 1` exists.
 */
export class StalenessThrottle {
  readonly maxConcurrent: number;
  readonly batchSize: number;
  readonly eta: number;
  #version = 0;
  #running = 0;
  #accepted = 0;
  #waiters: Waiter[] = [];

  constructor(opts: StalenessThrottleOptions) {
    const dp = opts.dpWorldSize ?? 1;
    const b = opts.consumerBatchSize;
    const conc = opts.maxConcurrentRollouts ?? b;
    const eta = opts.maxHeadOffpolicyness ?? 0;
    if (!(Number.isInteger(dp) && dp >= 1))
      throw invalidOption('--dp-world-size', `must be an integer >= 1 (got ${dp})`);
    if (!(Number.isInteger(b) && b >= 1))
      throw invalidOption('--rollout-batch-size', `must be an integer >= 1 (got ${b})`);
    if (!(Number.isInteger(conc) && conc >= 1))
      throw invalidOption('--async-num-tasks', `must be an integer >= 1 (got ${conc})`);
    if (!(Number.isInteger(eta) && eta >= 0))
      throw invalidOption('--max-head-offpolicyness', `must be an integer >= 0 (got ${eta})`);
    this.maxConcurrent = Math.max(1, Math.floor(conc / dp));
    this.batchSize = Math.max(1, Math.floor(b / dp));
    this.eta = eta;
  }

  /** The policy version new episodes will be generated with. */
  get version(): number {
    return this.#version;
  }
  /** Episodes started and not finished. */
  get running(): number {
    return this.#running;
  }
  /** Episodes finished and accepted. */
  get accepted(): number {
    return this.#accepted;
  }

  /** How many more episodes may start now (may be negative after a restore). */
  capacity(): number {
    return Math.min(
      this.maxConcurrent - this.#running,
      (this.eta + this.#version + 1) * this.batchSize - (this.#accepted + this.#running),
    );
  }

  /** Starts one episode if capacity allows; returns whether it did. */
  tryAdmit(): boolean {
    if (this.capacity() <= 0) return false;
    this.#running++;
    return true;
  }

  /** Resolves once one episode has been admitted (FIFO among waiters). */
  admit(signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#waiters.length === 0 && this.tryAdmit()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const w: Waiter = { resolve, reject };
      if (signal) {
        w.signal = signal;
        w.onAbort = () => {
          this.#waiters = this.#waiters.filter((x) => x !== w);
          reject(signal.reason);
        };
        signal.addEventListener('abort', w.onAbort, { once: true });
      }
      this.#waiters.push(w);
    });
  }

  /** An admitted episode ended; `accepted` false when it was rejected (it then frees its budget). */
  finish(accepted: boolean): void {
    if (this.#running <= 0)
      throw new AlgorithmError('SHAPE_MISMATCH', 'finish() without a running episode', {
        field: 'running',
      });
    this.#running--;
    if (accepted) this.#accepted++;
    this.#wake();
  }

  /** The trainer published `version`. */
  setVersion(version: number): void {
    this.#version = version;
    this.#wake();
  }

  /** After restoring a checkpoint at `version`: count its batches as accepted, so submissions do not burst. */
  restore(version: number): void {
    this.#version = version;
    this.#accepted = version * this.batchSize;
    this.#running = 0;
    this.#wake();
  }

  #wake(): void {
    while (this.#waiters.length > 0 && this.tryAdmit()) {
      const w = this.#waiters.shift() as Waiter;
      if (w.signal && w.onAbort) w.signal.removeEventListener('abort', w.onAbort);
      w.resolve();
    }
  }
}
