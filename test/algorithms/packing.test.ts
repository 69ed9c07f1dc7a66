import * as tf from '@tensorflow/tfjs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { aggregateLoss, type LossAggregation } from '../../algorithms/loss-aggregation.ts';
import {
  lossWeights,
  microBatches,
  packMicroBatches,
  packedRows,
  padRows,
  rankMicroBatches,
} from '../../algorithms/packing.ts';
import { ppoActorLoss } from '../../algorithms/policy-loss.ts';
import { near, throwsCode } from './helpers.ts';

await tf.setBackend('cpu');

test('aggregation modes (hand-computed)', () => {
  const l = tf.tensor([
    [1, 2, 3],
    [4, 0, 0],
  ]);
  const m = tf.tensor([
    [1, 1, 1],
    [1, 0, 0],
  ]);
  near(aggregateLoss(l, m).dataSync(), [2.5]);
  near(aggregateLoss(l, m, { lossAggMode: 'seq-mean-token-mean' }).dataSync(), [3]);
  near(
    aggregateLoss(l, m, { lossAggMode: 'seq-mean-token-sum-norm', lossNormConstant: 4 }).dataSync(),
    [1.25],
  );
  const masked = tf.tensor([
    [1, 1],
    [0, 0],
  ]);
  const l2 = tf.tensor([
    [1, 2],
    [5, 5],
  ]);
  near(aggregateLoss(l2, masked, { lossAggMode: 'seq-mean-token-mean' }).dataSync(), [1.5]);
  near(aggregateLoss(l2, tf.zeros([2, 2])).dataSync(), [0]);
  near(aggregateLoss(l2, tf.zeros([2, 2]), { lossAggMode: 'seq-mean-token-mean' }).dataSync(), [0]);
  throwsCode(() => aggregateLoss(l2, tf.zeros([2, 3])), 'SHAPE_MISMATCH', 'mask');
});

test('loss weights are the full-batch normalisers', () => {
  near(lossWeights([[0, 1, 1], [1]])[0]!, [0, 1 / 3, 1 / 3]);
  const s = lossWeights([[1, 1], [1], [0]], { lossAggMode: 'seq-mean-token-mean' });
  near(s[0]!, [0.25, 0.25]);
  near(s[1]!, [0.5]);
  near(s[2]!, [0]);
  near(
    lossWeights([[1, 1], [0]], {
      lossAggMode: 'seq-mean-token-sum-norm',
      lossNormConstant: 10,
    })[0]!,
    [0.05, 0.05],
  );
  near(lossWeights([[0, 0]])[0]!, [0, 0]);
});

test('packing respects the budget and places every sample exactly once', () => {
  const lengths = [7, 3, 9, 2, 5, 5, 1, 12, 4];
  const mbs = packMicroBatches(lengths, { maxTokens: 10 });
  const seen = mbs.flatMap((b) => b.indices).sort((a, b) => a - b);
  assert.equal(
    seen,
    lengths.map((_, i) => i),
  );
  for (const b of mbs) {
    assert.is(
      b.tokens,
      b.indices.reduce((s, i) => s + lengths[i]!, 0),
    );
    assert.ok(b.tokens <= 10 || b.indices.length === 1, `over budget: ${JSON.stringify(b)}`);
  }
  // 48 tokens, budget 10: 12 alone, and FFD reaches the 5-bin lower bound for the rest (36 tokens → 4)
  assert.is(mbs.length, 5);
  assert.equal(
    packMicroBatches([3, 3, 3], { maxTokens: 100, maxSamples: 2 }).map((b) => b.indices),
    [[0, 1], [2]],
  );
  assert.equal(packMicroBatches([], { maxTokens: 4 }), []);
  throwsCode(
    () => packMicroBatches([1], { maxTokens: 0 }),
    'INVALID_OPTION',
    '--train-max-tokens-per-gpu',
  );
});

test('micro-batch losses with packing weights sum to the full-batch loss and gradient, for every mode', () => {
  const T = 6;
  const rows = 5;
  const lens = [6, 2, 4, 1, 3];
  const mask: number[][] = lens.map((n, r) =>
    Array.from({ length: T }, (_, t) => (t < n && !(r === 2 && t === 0) ? 1 : 0)),
  );
  const adv = lens.map((_, r) => Array.from({ length: T }, (_, t) => Math.sin(r * 7 + t)));
  const old = lens.map((_, r) => Array.from({ length: T }, (_, t) => -0.5 - 0.1 * ((r + t) % 3)));
  const cur = lens.map((_, r) =>
    Array.from({ length: T }, (_, t) => -0.5 + 0.15 * Math.cos(r + 3 * t)),
  );
  const modes: [LossAggregation, number | undefined][] = [
    ['token-mean', undefined],
    ['seq-mean-token-mean', undefined],
    ['seq-mean-token-sum-norm', 8],
  ];
  for (const [lossAggMode, lossNormConstant] of modes) {
    const opts = { lossAggMode, ...(lossNormConstant ? { lossNormConstant } : {}) };
    const full = tf.valueAndGrad((x: tf.Tensor) =>
      ppoActorLoss(
        {
          logprobs: x,
          oldLogprobs: tf.tensor(old),
          advantages: tf.tensor(adv),
          mask: tf.tensor(mask),
        },
        opts,
      ),
    )(tf.tensor(cur));
    const weights = lossWeights(mask, opts);
    const mbs = packMicroBatches(lens, { maxTokens: 7 });
    assert.ok(mbs.length > 1);
    let sum = 0;
    const grad = new Float32Array(rows * T);
    for (const mb of mbs) {
      const pick = <T>(a: T[]) => mb.indices.map((i) => a[i]!);
      const w = padRows(pick(weights), T);
      const g = tf.valueAndGrad((x: tf.Tensor) =>
        ppoActorLoss(
          {
            logprobs: x,
            oldLogprobs: tf.tensor(pick(old)),
            advantages: tf.tensor(pick(adv)),
            mask: tf.tensor(pick(mask)),
            weights: tf.tensor(w.data, w.shape),
          },
          opts,
        ),
      )(tf.tensor(pick(cur)));
      sum += g.value.dataSync()[0]!;
      const gd = g.grad.dataSync();
      mb.indices.forEach((i, k) => grad.set(gd.subarray(k * T, (k + 1) * T), i * T));
    }
    near([sum], full.value.dataSync(), 1e-6);
    near(grad, full.grad.dataSync(), 1e-6);
  }
});

test('microBatches without a token budget cuts length-sorted samples (stable) by count', () => {
  const cuts = microBatches([9, 5, 9, 4], { maxSamples: 2 });
  assert.equal(
    cuts.map((c) => c.indices),
    [
      [3, 1],
      [0, 2],
    ],
  );
  assert.equal(
    cuts.map((c) => c.tokens),
    [9, 18],
  );
});

test('microBatches with a token budget packs first-fit decreasing, capped by count', () => {
  const cuts = microBatches([6, 2, 3, 5], { maxSamples: 2, maxTokens: 8 });
  assert.equal(
    cuts.map((c) => c.indices),
    [
      [0, 1],
      [2, 3],
    ],
  );
  assert.throws(() => microBatches([1], { maxSamples: 0 }), /--micro-train-batch-size/);
});

/** Rows × longest row, summed over micro-batches. */
const paddedCost = (lengths: number[], cuts: { indices: number[] }[]) =>
  cuts.reduce((c, b) => c + b.indices.length * Math.max(...b.indices.map((i) => lengths[i]!)), 0);

test('rankMicroBatches gives each data-parallel rank a share of about equal padded cost', () => {
  // 32 lengths from 30 to 84, shuffled: cut by count, one rank would get all the long ones.
  const lengths = Array.from(
    { length: 32 },
    (_, i) => 30 + Math.round((54 * ((i * 13) % 32)) / 31),
  );
  const opts = { maxSamples: 16 };
  const byCount = microBatches(lengths, opts).map((b) => paddedCost(lengths, [b]));
  const shares = [0, 1].map((rank) => rankMicroBatches(lengths, { ...opts, rank, worldSize: 2 }));
  const costs = shares.map((s) => paddedCost(lengths, s));
  assert.ok(Math.max(...costs) < 0.85 * Math.max(...byCount), `${costs} vs ${byCount}`);
  assert.ok(Math.abs(costs[0]! - costs[1]!) <= 84, `balanced to within one sample: ${costs}`);
  assert.ok(shares.flat().every((b) => b.indices.length <= 16));
  const all = shares.flat().flatMap((b) => b.indices);
  assert.equal(
    [...all].sort((a, b) => a - b),
    lengths.map((_, i) => i),
    'each sample once',
  );
  // One rank is the plain cut; more ranks than samples leave some without work.
  assert.equal(
    rankMicroBatches(lengths, { ...opts, rank: 0, worldSize: 1 }),
    microBatches(lengths, opts),
  );
  const few = [0, 1, 2].map((rank) =>
    rankMicroBatches([5, 7], { maxSamples: 4, rank, worldSize: 3 }),
  );
  assert.equal(
    few.map((s) => s.flatMap((b) => b.indices)),
    [[0], [1], []],
  );
});

test('rankMicroBatches with an attention length balances a cost that grows with the square of the length', () => {
  const lengths = Array.from({ length: 32 }, (_, i) => 30 + ((i * 37) % 131)); // 30..160
  const K = 120;
  const rowCost = (t: number) => t * (1 + t / K);
  const cost = (cuts: { indices: number[] }[]) =>
    cuts.reduce(
      (c, b) => c + b.indices.length * Math.max(...b.indices.map((i) => rowCost(lengths[i]!))),
      0,
    );
  const opts = { maxSamples: 16, worldSize: 2 };
  const linear = [0, 1].map((rank) => rankMicroBatches(lengths, { ...opts, rank }));
  const quad = [0, 1].map((rank) =>
    rankMicroBatches(lengths, { ...opts, rank, attentionLength: K }),
  );
  const gap = (s: { indices: number[] }[][]) => Math.abs(cost(s[0]!) - cost(s[1]!));
  // Cut for linear cost, the rank with the long rows gets too many of them.
  assert.ok(gap(quad) < gap(linear) / 2, `${gap(quad)} vs ${gap(linear)}`);
  assert.ok(gap(quad) <= rowCost(160), `within one row: ${gap(quad)}`);
  const rows = (s: { indices: number[] }[]) => s.flatMap((b) => b.indices).length;
  assert.ok(rows(quad[1]!) < rows(linear[1]!), 'fewer long rows on the long rank');
  assert.equal(
    quad
      .flat()
      .flatMap((b) => b.indices)
      .sort((a, b) => a - b),
    lengths.map((_, i) => i),
    'each sample once',
  );
});

test('packedRows lays each next-token row at its sequence start, 0 across sequences', () => {
  // sequences of 3, 1 and 2 tokens: rows of 2, 0 and 1 entries; width 6 - 1
  const { data, shape } = packedRows([[1, 2], [], [5]], [3, 1, 2]);
  assert.equal(shape, [1, 5]);
  assert.equal(Array.from(data), [1, 2, 0, 0, 5]);
  throwsCode(() => packedRows([[1, 2, 3]], [3]), 'SHAPE_MISMATCH');
});

test.run();
