import * as tf from '@tensorflow/tfjs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { stopGradient } from '../../algorithms/policy-loss-types.ts';
import {
  policyLossStats,
  ppoActorLoss,
  resolvePpoLossOptions,
  type PolicyLossInputs,
  type PpoLossOptions,
} from '../../algorithms/policy-loss.ts';
import { near, throwsCode } from './helpers.ts';

await tf.setBackend('cpu');

const t = (v: number[] | number[][]) => tf.tensor(v);

function lossAndGrad(
  inp: Omit<PolicyLossInputs, 'logprobs'> & { logprobs: number[] | number[][] },
  opts: PpoLossOptions,
) {
  const { value, grad } = tf.valueAndGrad((x: tf.Tensor) =>
    ppoActorLoss({ ...inp, logprobs: x }, opts),
  )(t(inp.logprobs));
  return { loss: value.dataSync()[0] as number, grad: Array.from(grad.dataSync()) };
}

// One sequence of four tokens with ratios r = π/π_old = 1.5, 0.5, 1.1, 0.7 and A = ±1.
const base = () => ({
  logprobs: [1.5, 0.5, 1.1, 0.7].map(Math.log),
  oldLogprobs: t([0, 0, 0, 0]),
  advantages: t([1, -1, 1, -1]),
  mask: t([1, 1, 1, 1]),
});

test('stopGradient passes the value and no gradient', () => {
  const g = tf.grad((x: tf.Tensor) => tf.sum(tf.mul(stopGradient(x), x)))(t([2, 3]));
  near(Array.from(g.dataSync()), [2, 3]);
});

test('gspo: one sequence ratio s = (Π r)^(1/4) inside the band; every token gets −A·s/|y|', () => {
  // s = (1.5·0.5·1.1·0.7)^(1/4) = 0.5775^(1/4) = 0.871742; per token −s·A → mean 0.
  const s = 0.871742;
  const { loss, grad } = lossAndGrad(base(), { policyLossType: 'gspo' });
  near([loss], [0]);
  near(grad, [-s / 4, s / 4, -s / 4, s / 4]);
  // PPO on the same tokens clips three of them (gradient 0 there).
  near(lossAndGrad(base(), { policyLossType: 'ppo' }).grad, [0, 0, -0.275, 0]);
});

test('gspo: a sequence outside the band is clipped as a whole; masked tokens leave s alone', () => {
  const inp = {
    // row 0: s = 2 > 1.2 with A > 0 → clipped to 1.2, no gradient. row 1: s = √0.9 = 0.948683;
    // its third token is masked out (a ratio of 5 there would change s).
    logprobs: [
      [Math.log(2), Math.log(2), 0],
      [Math.log(0.9), 0, Math.log(5)],
    ],
    oldLogprobs: t([
      [0, 0, 0],
      [0, 0, 0],
    ]),
    advantages: t([
      [1, 1, 0],
      [1, 1, 0],
    ]),
    mask: t([
      [1, 1, 0],
      [1, 1, 0],
    ]),
  };
  const s = 0.948683;
  const { loss, grad } = lossAndGrad(inp, { policyLossType: 'gspo' });
  // seq-mean-token-mean (gspo's default): mean of the row means −1.2 and −s.
  near([loss], [(-1.2 - s) / 2]);
  near(grad, [0, 0, 0, -s / 4, -s / 4, 0]);
  const stats = policyLossStats({ ...inp, logprobs: t(inp.logprobs) }, { policyLossType: 'gspo' });
  near([stats.clipFraction], [0.5]);
});

test('cispo: −sg(clip(r))·A·logπ; every token keeps a gradient scaled by its clipped weight', () => {
  // w = clip(r, 0.8, 1.2) = 1.2, 0.8, 1.1, 0.8; logπ = ln r.
  const lp = [1.5, 0.5, 1.1, 0.7].map(Math.log);
  const w = [1.2, 0.8, 1.1, 0.8];
  const a = [1, -1, 1, -1];
  const expected = -lp.reduce((acc, l, i) => acc + w[i]! * a[i]! * l, 0) / 4;
  const { loss, grad } = lossAndGrad(base(), { policyLossType: 'cispo' });
  near([loss], [expected]);
  near([expected], [-0.357814]);
  near(grad, [-0.3, 0.2, -0.275, 0.2]);
  const stats = policyLossStats(
    { ...base(), logprobs: t(base().logprobs) },
    { policyLossType: 'cispo' },
  );
  near([stats.clipFraction], [0.75]);
});

test('sapo: soft gate (4/τ)·σ(τ(r−1)), τ+ = 1, τ− = 1.05 (hand-computed)', () => {
  // σ(0.5) = 0.622459, σ(−0.525) = 0.371684, σ(0.1) = 0.524979, σ(−0.315) = 0.421895.
  const { loss, grad } = lossAndGrad(base(), { policyLossType: 'sapo' });
  near([loss], [(-2.489837 + 1.415939 - 2.099917 + 1.60722) / 4]);
  // ∂/∂logπ = −A·4σ(1−σ)·r / 4
  near(grad, [-0.352506, 0.116767, -0.274314, 0.17073]);
});

test('sapo: at r = 1 the gradient is the plain policy gradient whatever τ; far off it fades', () => {
  const inp = {
    logprobs: [0, 0, Math.log(5)],
    oldLogprobs: t([0, 0, 0]),
    advantages: t([2, -1, 1]),
    mask: t([1, 1, 1]),
  };
  const { grad } = lossAndGrad(inp, { policyLossType: 'sapo', sapoTauPos: 3, sapoTauNeg: 7 });
  near(grad.slice(0, 2), [-2 / 3, 1 / 3]);
  // r = 5, τ = 3: 4σ(12)(1−σ(12))·5 ≈ 1.2e-4 of the plain gradient's scale.
  assert.ok(Math.abs(grad[2]!) < 1e-4, `got ${grad[2]}`);
  const stats = policyLossStats(
    { ...inp, logprobs: t(inp.logprobs) },
    { policyLossType: 'sapo', sapoTauPos: 3, sapoTauNeg: 7 },
  );
  near([stats.clipFraction], [1 / 3]);
});

test('options: gspo and sapo default to seq-mean-token-mean; vanilla is ppo; errors name the flag', () => {
  assert.is(resolvePpoLossOptions({ policyLossType: 'gspo' }).lossAggMode, 'seq-mean-token-mean');
  assert.is(resolvePpoLossOptions({ policyLossType: 'sapo' }).lossAggMode, 'seq-mean-token-mean');
  assert.is(resolvePpoLossOptions({ policyLossType: 'cispo' }).lossAggMode, 'token-mean');
  assert.is(
    resolvePpoLossOptions({ policyLossType: 'gspo', lossAggMode: 'token-mean' }).lossAggMode,
    'token-mean',
  );
  assert.is(resolvePpoLossOptions({ policyLossType: 'vanilla' as 'ppo' }).policyLossType, 'ppo');
  throwsCode(
    () => resolvePpoLossOptions({ policyLossType: 'grpo' as 'ppo' }),
    'INVALID_OPTION',
    '--policy-loss-type',
  );
  throwsCode(
    () => resolvePpoLossOptions({ policyLossType: 'cispo', dualClip: 3 }),
    'INVALID_OPTION',
    '--dual-clip',
  );
  throwsCode(() => resolvePpoLossOptions({ sapoTauNeg: 0 }), 'INVALID_OPTION', '--sapo-tau-neg');
});

test.run();
