/**
 * The data-parallel ranks' cost model: from (Σ rows·T, Σ rows·T², ms) of each rank's share it
 * learns how much attention weighs, the same on every rank, and falls back to linear cost when it
 * has too little or nonsensical data.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ShareCost } from '../../roles/data-parallel.ts';

/** Shares of `rows` rows of length `t`, timed by ms = a·Σrows·T + b·Σrows·T² (+ noise). */
const observe = (c: ShareCost, a: number, b: number, shares: [number, number][], noise = 0) => {
  let k = 1;
  for (const [rows, t] of shares) {
    const wobble = noise ? 1 + noise * Math.sin(k++ * 12.9898) : 1;
    c.observe(rows * t, rows * t * t, (a * rows * t + b * rows * t * t) * wobble);
  }
};
const steps: [number, number][] = [
  [18, 45],
  [14, 120],
  [17, 60],
  [15, 150],
  [20, 40],
  [12, 160],
  [16, 80],
  [16, 100],
];

test('learns the length at which attention costs as much as the rest (a / b)', () => {
  const exact = new ShareCost();
  observe(exact, 0.16, 0.0013, steps);
  const k = exact.attentionLength()!;
  assert.ok(Math.abs(k - 0.16 / 0.0013) < 1, `exact data: ${k}`);
  const noisy = new ShareCost();
  observe(noisy, 0.16, 0.0013, [...steps, ...steps, ...steps], 0.05);
  const kn = noisy.attentionLength()!;
  assert.ok(Math.abs(kn / (0.16 / 0.0013) - 1) < 0.3, `5% noise: ${kn}`);
});

test('linear until enough steps are seen, or when the data show no quadratic term', () => {
  const early = new ShareCost();
  observe(early, 0.16, 0.0013, steps.slice(0, 3));
  assert.is(early.attentionLength(), undefined, 'three observations');
  const flat = new ShareCost();
  observe(flat, 0.2, -0.0001, steps);
  assert.is(flat.attentionLength(), undefined, 'a negative quadratic term');
  const same = new ShareCost();
  observe(same, 0.16, 0.0013, [
    [16, 80],
    [16, 80],
    [16, 80],
    [16, 80],
  ]);
  assert.is(same.attentionLength(), undefined, 'one shape only: nothing to tell a from b');
  const junk = new ShareCost();
  for (let i = 0; i < 6; i++) junk.observe(0, 0, 5);
  assert.is(junk.attentionLength(), undefined, 'empty shares');
});

test.run();
