/**
 * Several datasets as one, as OpenRLHF's `blending_datasets` makes them: each dataset's split,
 * cut to its first `maxSamples`; without probabilities they are concatenated; with them they are
 * interleaved (Hugging Face's `interleave_datasets`, stopping strategy `all_exhausted`): each
 * record is drawn from dataset i with probability p_i, a dataset that runs out starts again, and
 * the blend ends once every dataset has been read through at least once. The blend is then cut
 * to `maxSamples` as a whole, as OpenRLHF's `train_ppo` does.
 *
 * @module
 */
import { builtinDataset } from './arith.ts';
import { DatasetError } from './errors.ts';
import { readRecords } from './read.ts';
import type { DataRecord } from './text-formats.ts';
import { seededRandom } from '../../model/prng.ts';

/** Options of {@link loadDatasets}. */
export interface BlendOptions {
  /** The split read from each dataset. @default 'train' */
  split?: string;
  /** Records taken from each dataset, and from the blend. @default all */
  maxSamples?: number;
  /** One probability per dataset (normalised); unset: concatenate. */
  probs?: readonly number[];
  /** Seed of the interleaving. @default 42 */
  seed?: number;
  /** Records of a built-in dataset (generated). @default its own size */
  builtinSize?: number;
}

/**
 * Interleaves `lists` drawing list i with probability `probs[i]` until every list has been read
 * through once (lists that run out start again). Pure; the same seed gives the same blend.
 */
export function interleave<T>(
  lists: readonly (readonly T[])[],
  probs: readonly number[],
  seed: number,
): T[] {
  const total = probs.reduce((a, b) => a + b, 0);
  const live = lists.map((l, i) => (l.length > 0 ? (probs[i] ?? 0) : 0));
  const liveTotal = live.reduce((a, b) => a + b, 0);
  if (!(total > 0) || !(liveTotal > 0)) return [];
  const next = lists.map(() => 0);
  const done = lists.map((l, i) => l.length === 0 || live[i] === 0);
  const rand = seededRandom(seed);
  const out: T[] = [];
  while (!done.every(Boolean)) {
    let u = rand() * liveTotal;
    let i = 0;
    while (i < live.length - 1 && u >= live[i]!) u -= live[i++]!;
    while (live[i] === 0) i--;
    const list = lists[i]!;
    out.push(list[next[i]!]!);
    next[i] = (next[i]! + 1) % list.length;
    if (next[i] === 0) done[i] = true;
  }
  return out;
}

/** `'0.7,0.3'` → `[0.7, 0.3]`, checked against the number of datasets. */
export function parseProbs(text: string, datasets: number): number[] {
  const probs = text.split(',').map((s) => Number(s.trim()));
  if (probs.length !== datasets || probs.some((p) => !(p >= 0)))
    throw new DatasetError(
      'DATASET_FORMAT',
      text,
      `probabilities '${text}' must be ${datasets} non-negative numbers, one per dataset`,
    );
  return probs;
}

/** One dataset's records: a built-in name (`arith`, `arith:test`, or `arith` of the split) or a path. */
async function oneDataset(spec: string, opts: BlendOptions): Promise<DataRecord[]> {
  const size = opts.builtinSize !== undefined ? { size: opts.builtinSize } : {};
  const split = opts.split ?? 'train';
  const builtin =
    (split === 'test' && !spec.includes(':') ? builtinDataset(`${spec}:test`, size) : undefined) ??
    builtinDataset(spec, size);
  if (builtin) return (builtin as unknown as DataRecord[]).slice(0, opts.maxSamples);
  const out: DataRecord[] = [];
  for await (const r of readRecords(spec, {
    split,
    ...(opts.maxSamples !== undefined ? { maxSamples: opts.maxSamples } : {}),
  }))
    out.push(r);
  if (out.length === 0) throw new DatasetError('DATASET_NOT_FOUND', spec, `${spec} has no records`);
  return out;
}

/**
 * The records of `specs` (comma-separated datasets, each a built-in name, a file or a directory)
 * blended as OpenRLHF blends them (see the module's doc).
 */
export async function loadDatasets(specs: string, opts: BlendOptions = {}): Promise<DataRecord[]> {
  const parts = specs
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const probs = opts.probs;
  if (probs && probs.length !== parts.length)
    throw new DatasetError(
      'DATASET_FORMAT',
      specs,
      `${probs.length} probabilities for ${parts.length} datasets (${parts.join(', ')})`,
    );
  const lists: DataRecord[][] = [];
  for (const p of parts) lists.push(await oneDataset(p, opts));
  const blend =
    probs && parts.length > 1 ? interleave(lists, probs, opts.seed ?? 42) : lists.flat();
  return blend.slice(0, opts.maxSamples);
}
