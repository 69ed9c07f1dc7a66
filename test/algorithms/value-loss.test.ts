import * as tf from '@tensorflow/tfjs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readValueLossChecks, valueLoss } from '../../algorithms/value-loss.ts';
import { near, throwsCode } from './helpers.ts';

await tf.setBackend('cpu');

const inputs = () => ({
  oldValues: tf.tensor([0.5, 2.0]),
  returns: tf.tensor([2.0, 1.0]),
  mask: tf.tensor([1, 1]),
});

test('clipped value loss takes the larger of clipped and unclipped errors (hand-computed)', () => {
  // token 0: clipped 0.7 → (0.7−2)² = 1.69 > (1−2)² = 1; token 1: 1 → 0.5·mean = 0.6725
  const { value, grad } = tf.valueAndGrad(
    (v: tf.Tensor) => valueLoss({ ...inputs(), values: v }, { valueClip: 0.2 }).loss,
  )(tf.tensor([1.0, 2.0]));
  near(value.dataSync(), [0.6725]);
  near(grad.dataSync(), [0, 0.5]);
});

test('without clipping it is half the mean squared error', () => {
  const v = valueLoss({ ...inputs(), values: tf.tensor([1.0, 2.0]) }, { valueClip: null });
  near(v.loss.dataSync(), [0.5]);
});

test('masked tokens are ignored; non-finite inputs are reported by the checks read with the loss', () => {
  const v = valueLoss(
    { ...inputs(), values: tf.tensor([1.0, 9.0]), mask: tf.tensor([1, 0]) },
    { valueClip: 0.2 },
  );
  near(v.loss.dataSync(), [0.5 * 1.69]);
  readValueLossChecks(v.checks.dataSync());
  const bad = (field: 'returns' | 'oldValues', x: number) =>
    valueLoss({ ...inputs(), values: tf.tensor([1, 1]), [field]: tf.tensor([x, 1]) }).checks;
  throwsCode(
    () => readValueLossChecks(bad('returns', NaN).dataSync()),
    'NON_FINITE_INPUT',
    'returns',
  );
  throwsCode(
    () => readValueLossChecks(bad('oldValues', -Infinity).dataSync()),
    'NON_FINITE_INPUT',
    'oldValues',
  );
  // Without checkFinite the checks are zeros, whatever the inputs hold.
  const off = valueLoss(
    { ...inputs(), values: tf.tensor([1, 1]), returns: tf.tensor([NaN, 1]) },
    { checkFinite: false },
  );
  assert.equal(Array.from(off.checks.dataSync()), [0, 0]);
  throwsCode(
    () => valueLoss({ ...inputs(), values: tf.tensor([1, 1]) }, { valueClip: -1 }),
    'INVALID_OPTION',
    '--value-clip',
  );
});

test.run();
