/**
 * Reward normalisation (`--normalize-reward`): running mean and variance of scores over every
 * batch seen (Welford/Chan merge), applied as `(r − μ)/σ`.
 *
 * @module
 */
import { assertFinite, type Numbers } from './validate.ts';

/** Running statistics of rewards; `state` round-trips through checkpoints. */
export class RewardNormalizer {
  #count = 0;
  #mean = 0;
  #m2 = 0;

  constructor(state?: { count: number; mean: number; m2: number }) {
    if (state) {
      assertFinite([state.count, state.mean, state.m2], 'rewardNormalizer.state');
      this.#count = state.count;
      this.#mean = state.mean;
      this.#m2 = state.m2;
    }
  }

  /** Merges a batch of scores into the running statistics. */
  update(scores: Numbers): void {
    assertFinite(scores, 'scores');
    const n = scores.length;
    if (n === 0) return;
    let mean = 0;
    for (let i = 0; i < n; i++) mean += scores[i] as number;
    mean /= n;
    let m2 = 0;
    for (let i = 0; i < n; i++) m2 += ((scores[i] as number) - mean) ** 2;
    const total = this.#count + n;
    const delta = mean - this.#mean;
    this.#m2 += m2 + (delta * delta * this.#count * n) / total;
    this.#mean += (delta * n) / total;
    this.#count = total;
  }

  /** Running mean. */
  get mean(): number {
    return this.#mean;
  }
  /** Running population standard deviation (1 before any data). */
  get std(): number {
    return this.#count > 0 ? Math.sqrt(this.#m2 / this.#count) : 1;
  }

  /** `(r − μ)/max(σ, 1e-8)` for each score. */
  normalize(scores: Numbers): Float64Array {
    assertFinite(scores, 'scores');
    const s = Math.max(this.std, 1e-8);
    return Float64Array.from(scores, (r) => (r - this.#mean) / s);
  }

  /** Serialisable state for checkpoints. */
  state(): { count: number; mean: number; m2: number } {
    return { count: this.#count, mean: this.#mean, m2: this.#m2 };
  }
}
