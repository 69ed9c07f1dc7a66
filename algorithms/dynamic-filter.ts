/**
 * Dynamic filtering (DAPO, OpenRLHF `--dynamic-filtering`): keep a prompt's group only if its
 * mean reward lies strictly inside a range, so all-correct and all-wrong groups, which carry no
 * group-relative signal, are dropped; report the pass rate.
 *
 * @module
 */
import { invalidOption } from './errors.ts';
import { assertFinite } from './validate.ts';

/** Options of {@link dynamicFilter}. */
export interface DynamicFilterOptions {
  /** Open range for a group's mean reward (`--dynamic-filtering-reward-range`). @default [0, 1] */
  rewardRange?: readonly [number, number];
}

/** Defaults for {@link DynamicFilterOptions}. */
export const dynamicFilterDefaults = { rewardRange: [0, 1] as readonly [number, number] };

/** What {@link dynamicFilter} kept and why. */
export interface DynamicFilterResult<T> {
  /** Items of the kept groups, in input order. */
  kept: T[];
  /** Group ids that were dropped, in first-seen order. */
  rejectedGroups: string[];
  /** Kept groups / all groups (1 for an empty input). */
  passRate: number;
  /** Number of groups seen. */
  groups: number;
}

/** Margin that keeps a mean of exactly 0 or 1, computed with rounding error, outside the range. */
const EPS = 1e-6;

/**
 * Keeps the groups whose mean reward `m` satisfies `lo + 1e-6 < m < hi − 1e-6`.
 *
 * @example
 * dynamicFilter([{ groupId: 'a', reward: 1 }, { groupId: 'a', reward: 1 },
 *                { groupId: 'b', reward: 1 }, { groupId: 'b', reward: 0 }]).passRate // 0.5
 */
export function dynamicFilter<T extends { groupId: string; reward: number }>(
  items: readonly T[],
  opts: DynamicFilterOptions = {},
): DynamicFilterResult<T> {
  const [lo, hi] = opts.rewardRange ?? dynamicFilterDefaults.rewardRange;
  if (!(lo < hi))
    throw invalidOption('--dynamic-filtering-reward-range', `low ${lo} must be below high ${hi}`);
  assertFinite(
    items.map((i) => i.reward),
    'rewards',
  );
  const sums = new Map<string, { sum: number; n: number }>();
  for (const it of items) {
    const g = sums.get(it.groupId) ?? { sum: 0, n: 0 };
    g.sum += it.reward;
    g.n++;
    sums.set(it.groupId, g);
  }
  const keep = new Set<string>();
  const rejectedGroups: string[] = [];
  for (const [id, { sum, n }] of sums) {
    const mean = sum / n;
    if (lo + EPS < mean && mean < hi - EPS) keep.add(id);
    else rejectedGroups.push(id);
  }
  return {
    kept: items.filter((i) => keep.has(i.groupId)),
    rejectedGroups,
    passRate: sums.size === 0 ? 1 : keep.size / sums.size,
    groups: sums.size,
  };
}
