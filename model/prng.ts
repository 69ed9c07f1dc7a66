/**
 * The project's seeded uniform generator, free of TF.js so that light modules (test fakes,
 * datasets) can use it without loading a backend.
 *
 * @module
 */

/**
 * A small, fast, seedable uniform [0, 1) generator (mulberry32): the same seed gives the same
 * stream on every platform.
 *
 * @example
 * const rand = seededRandom(7);
 * const x = rand(); // 0 <= x < 1
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
