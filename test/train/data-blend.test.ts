/**
 * OpenRLHF's blending: `--prompt_data a,b --prompt_data_probs 0.7,0.3` interleaves the datasets
 * in those proportions until each is read through once; without probabilities they are
 * concatenated; `--max_samples` cuts each dataset and the blend.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { interleave, loadDatasets, parseProbs } from '../../train/data/blend.ts';
import { isRtjobError } from '../../runtime/errors.ts';
import { writeJsonl, writeParquet } from '../fixtures/data/datasets.ts';

const root = mkdtempSync(join(tmpdir(), 'rtjob-data-blend-'));
const range = (tag: string, n: number): string[] =>
  Array.from({ length: n }, (_, i) => `${tag}${i}`);

test('interleave draws in proportion 0.7 : 0.3 and stops once every list is read through', () => {
  const a = range('a', 7000);
  const b = range('b', 3000);
  const out = interleave([a, b], [0.7, 0.3], 42);
  const fromA = out.filter((x) => x.startsWith('a')).length;
  const first = out.slice(0, 5000);
  const shareA = first.filter((x) => x.startsWith('a')).length / first.length;
  assert.ok(Math.abs(shareA - 0.7) < 0.03, `share of a in the first 5000: ${shareA}`);
  assert.ok(new Set(out.filter((x) => x.startsWith('a'))).size === 7000, 'every a drawn');
  assert.ok(new Set(out.filter((x) => x.startsWith('b'))).size === 3000, 'every b drawn');
  assert.ok(fromA >= 7000 && out.length - fromA >= 3000);
  const last = out[out.length - 1]!;
  assert.ok(
    last === 'a6999' || last === 'b2999',
    `ends as a list runs out for the first time: ${last}`,
  );
});

test('interleave: a small list with a large share starts again (oversampling), as all_exhausted', () => {
  const out = interleave([range('s', 10), range('l', 1000)], [0.5, 0.5], 1);
  const small = out.filter((x) => x.startsWith('s')).length;
  assert.ok(small > 900 && small < 1100, `the 10-record list was drawn ${small} times`);
  assert.is(out.filter((x) => x === 's0').length, Math.ceil(small / 10), 'in turn, s0 to s9');
});

test('interleave: the same seed gives the same blend; another seed another', () => {
  const lists = [range('a', 50), range('b', 50)];
  assert.equal(interleave(lists, [0.5, 0.5], 7), interleave(lists, [0.5, 0.5], 7));
  assert.not.equal(interleave(lists, [0.5, 0.5], 7), interleave(lists, [0.5, 0.5], 8));
});

test('interleave: a zero probability leaves its list out', () => {
  const out = interleave([range('a', 20), range('b', 20)], [1, 0], 3);
  assert.equal(out, range('a', 20));
});

test('loadDatasets: a parquet file and a JSONL file, blended, concatenated, and cut by maxSamples', async () => {
  const pq = join(root, 'a.parquet');
  const jl = join(root, 'b.jsonl');
  writeParquet(
    pq,
    range('a', 300).map((q) => ({ q })),
  );
  writeJsonl(
    jl,
    range('b', 100).map((q) => ({ q })),
  );
  const cat = await loadDatasets(`${pq},${jl}`);
  assert.is(cat.length, 400);
  assert.equal([cat[0], cat[300]], [{ q: 'a0' }, { q: 'b0' }]);
  const blend = await loadDatasets(`${pq}, ${jl}`, { probs: [0.75, 0.25], seed: 5 });
  const share = blend.slice(0, 200).filter((r) => String(r['q']).startsWith('a')).length / 200;
  assert.ok(Math.abs(share - 0.75) < 0.1, `share of a: ${share}`);
  const capped = await loadDatasets(`${pq},${jl}`, { maxSamples: 50 });
  assert.is(capped.length, 50, 'the blend is cut too');
  const each = await loadDatasets(`${pq},${jl}`, { maxSamples: 20, probs: [0.5, 0.5] });
  assert.ok(
    each.every((r) => Number(String(r['q']).slice(1)) < 20),
    'each dataset cut to its first 20',
  );
});

test('loadDatasets: built-in names take the split (arith with split test is arith:test)', async () => {
  const test_ = await loadDatasets('arith', { split: 'test', builtinSize: 5 });
  const named = await loadDatasets('arith:test', { builtinSize: 5 });
  assert.equal(test_, named);
  const train = await loadDatasets('arith', { builtinSize: 5 });
  assert.not.equal(train, named);
});

test('probabilities that do not match the datasets are one line', async () => {
  for (const [fn, re] of [
    [
      () => parseProbs('0.7,x', 2),
      /probabilities '0\.7,x' must be 2 non-negative numbers, one per dataset$/,
    ],
    [() => parseProbs('0.7', 2), /must be 2 non-negative numbers/],
  ] as const) {
    try {
      fn();
      assert.unreachable();
    } catch (err) {
      assert.ok(isRtjobError(err, 'DATASET_FORMAT'));
      assert.match((err as Error).message, re);
    }
  }
  const err = await loadDatasets('arith,arith:test', { probs: [1] }).catch((e: unknown) => e);
  assert.match((err as Error).message, /^1 probabilities for 2 datasets \(arith, arith:test\)$/);
});

test.after(() => rmSync(root, { recursive: true, force: true }));
test.run();
