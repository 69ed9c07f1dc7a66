/**
 * The one seeded shuffle of the RL code: the prompt sampler's epoch order and the trainer's
 * micro-batch order across epochs both use it, so a seed means the same thing everywhere.
 *
 * @module
 */

/** Seeded in-place Fisher–Yates (mulberry32); returns `a`. */
export function shuffle<T>(a: T[], seed: number): T[] {
  let s = seed >>> 0;
  const rand = (): number => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}
