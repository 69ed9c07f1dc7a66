/**
 * The one seeded shuffle of the RL code: the prompt sampler's epoch order and the trainer's
 * micro-batch order across epochs and train_sft's epoch order all use it, on the project's one
 * seeded generator, so a seed means the same thing everywhere.
 *
 * @module
 */
import { seededRandom } from '../model/prng.ts';

/** Seeded in-place Fisher–Yates (on {@link seededRandom}, mulberry32); returns `a`. */
export function shuffle<T>(a: T[], seed: number): T[] {
  const rand = seededRandom(seed);
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}
