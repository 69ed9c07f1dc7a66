import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  AdaptiveKlController,
  createKlController,
  FixedKlController,
  klEstimate,
  klPerToken,
  resolveKlOptions,
} from '../../algorithms/kl.ts';
import { near, throwsCode } from './helpers.ts';

test('k1, k2, k3 match their formulas at x = 0.5', () => {
  near(klPerToken([-1], [-1.5], [1], 'k1'), [0.5]);
  near(klPerToken([-1], [-1.5], [1], 'k2'), [0.125]);
  near(klPerToken([-1], [-1.5], [1], 'k3'), [Math.exp(-0.5) - 0.5]);
  near(klPerToken([-2], [-1], [1], 'k3'), [Math.exp(1) - 2]);
});

test('estimates are clamped to ±10', () => {
  assert.is(klEstimate(30, 'k1'), 10);
  assert.is(klEstimate(-15, 'k1'), -10);
  assert.is(klEstimate(5, 'k2'), 10);
  assert.is(klEstimate(-20, 'k3'), 10);
  near([klEstimate(4, 'k2')], [8]);
});

test('masked tokens get zero KL and identical policies get zero', () => {
  near(klPerToken([-1, -2, -3], [-9, -2, -3], [0, 1, 1], 'k3'), [0, 0, 0]);
  near(klPerToken([], [], [], 'k1'), []);
});

test('NaN or Inf logprobs are rejected naming the field', () => {
  throwsCode(() => klPerToken([NaN], [0], [1]), 'NON_FINITE_INPUT', 'logprobs[0]');
  throwsCode(
    () => klPerToken([0, 0], [0, -Infinity], [1, 1]),
    'NON_FINITE_INPUT',
    'refLogprobs[1]',
  );
  throwsCode(() => klPerToken([0, 0], [0], [1, 1]), 'SHAPE_MISMATCH', 'refLogprobs');
});

test('adaptive controller follows β·(1 + clip(KL/target − 1, ±0.2)·n/horizon)', () => {
  const c = new AdaptiveKlController(0.1, 6, 10000);
  c.update(3, 100); // error clipped to -0.2 → ×0.998
  near([c.value], [0.0998], 1e-12);
  c.update(6.6, 1000); // error 0.1 → ×1.01
  near([c.value], [0.0998 * 1.01], 1e-12);
});

test('fixed controller never moves; createKlController picks by klTarget', () => {
  const f = createKlController({ initKlCoef: 0.05 });
  assert.instance(f, FixedKlController);
  f.update(100, 1000);
  assert.is(f.value, 0.05);
  const a = createKlController({ initKlCoef: 0.05, klTarget: 0.1, klHorizon: 100 });
  assert.instance(a, AdaptiveKlController);
});

test('options are validated with the flag in the message', () => {
  throwsCode(() => resolveKlOptions({ klTarget: -1 }), 'INVALID_OPTION', '--kl-target');
  throwsCode(() => resolveKlOptions({ initKlCoef: NaN }), 'INVALID_OPTION', '--init-kl-coef');
  throwsCode(
    () => resolveKlOptions({ klEstimator: 'k4' as 'k1' }),
    'INVALID_OPTION',
    '--kl-estimator',
  );
  assert.equal(resolveKlOptions({ initKlCoef: undefined }).initKlCoef, 0.01);
});

test.run();
