import * as tf from '@tensorflow/tfjs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  entropyFromLogits,
  policyLossStats,
  ppoActorLoss,
  ppoActorLossWithStats,
  readPolicyLossStats,
  resolvePpoLossOptions,
  type PolicyLossInputs,
  type PpoLossOptions,
} from '../../algorithms/policy-loss.ts';
import { near, throwsCode } from './helpers.ts';

await tf.setBackend('cpu');

const t = (v: number[] | number[][]) => tf.tensor(v);

/** Loss value and gradient w.r.t. the current logprobs. */
function lossAndGrad(
  inp: Omit<PolicyLossInputs, 'logprobs'> & { logprobs: number[] | number[][] },
  opts: PpoLossOptions = {},
) {
  const lp = t(inp.logprobs);
  const { value, grad } = tf.valueAndGrad((x: tf.Tensor) =>
    ppoActorLoss({ ...inp, logprobs: x }, opts),
  )(lp);
  return { loss: value.dataSync()[0] as number, grad: Array.from(grad.dataSync()) };
}

const ratios = [1.5, 0.5, 1.1, 0.7];
const base = () => ({
  logprobs: ratios.map(Math.log),
  oldLogprobs: t([0, 0, 0, 0]),
  advantages: t([1, -1, 1, -1]),
  mask: t([1, 1, 1, 1]),
});

test('symmetric PPO clip: value and gradient (hand-computed)', () => {
  // per token: −1.2, 0.8, −1.1, 0.8 → mean −0.175; only token 2 is unclipped: ∂/∂logp = −A·r/4
  const { loss, grad } = lossAndGrad(base());
  near([loss], [-0.175]);
  near(grad, [0, 0, -0.275, 0]);
});

test('asymmetric clip-higher raises only the upper bound', () => {
  const { loss } = lossAndGrad(base(), { epsClip: 0.2, epsClipHigh: 0.28 });
  near([loss], [(-1.28 + 0.8 - 1.1 + 0.8) / 4]);
});

test('dual clip bounds the loss of negative advantages at c·|A|', () => {
  const inp = {
    logprobs: [Math.log(5), Math.log(5)],
    oldLogprobs: t([0, 0]),
    advantages: t([-1, 1]),
    mask: t([1, 1]),
  };
  near([lossAndGrad(inp).loss], [(5 - 1.2) / 2]);
  const dual = lossAndGrad(inp, { dualClip: 3 });
  near([dual.loss], [(3 - 1.2) / 2]);
  near(dual.grad, [0, 0]);
});

test('the log-ratio is clamped at ±20 so the loss stays finite', () => {
  const { loss } = lossAndGrad({
    logprobs: [50],
    oldLogprobs: t([0]),
    advantages: t([-1]),
    mask: t([1]),
  });
  near([loss / Math.exp(20)], [1], 1e-4);
});

test('decoupled PPO: clip against the proximal policy, weight by π_prox/π_behav, zero above the cap', () => {
  const inp = {
    logprobs: [0, 0],
    oldLogprobs: t([0, 0]),
    behaviourLogprobs: t([-Math.log(2), -Math.log(10)]),
    advantages: t([1, 1]),
    mask: t([1, 1]),
  };
  const { loss, grad } = lossAndGrad(inp, { useDecoupledLoss: true, behavImpWeightCap: 5 });
  near([loss], [(-2 + 0) / 2]);
  near(grad, [-1, 0]);
  const stats = policyLossStats({ ...inp, logprobs: t([0, 0]) }, { useDecoupledLoss: true });
  near([stats.behaviourWeightMean, stats.behaviourWeightZeroFraction], [1, 0.5]);
  throwsCode(
    () =>
      ppoActorLoss(
        { ...inp, logprobs: t([0, 0]), behaviourLogprobs: undefined },
        { useDecoupledLoss: true },
      ),
    'SHAPE_MISMATCH',
    '--use-decoupled-loss',
  );
});

test('truncated IS (tis) clamps and icepop zeroes the engine/trainer ratio', () => {
  const inp = {
    logprobs: [0, 0, 0],
    oldLogprobs: t([0, 0, 0]),
    behaviourLogprobs: t([-Math.log(10), Math.log(4), -Math.log(2)]),
    advantages: t([1, 1, 1]),
    mask: t([1, 1, 1]),
  };
  // weights: tis clamp(10, 0.25, 2) → [5, 0.5, 2]; icepop → [0, 0, 2]
  near([lossAndGrad(inp, { isCorrection: 'tis' }).loss], [-(5 + 0.5 + 2) / 3]);
  near([lossAndGrad(inp, { isCorrection: 'icepop' }).loss], [-(0 + 0 + 2) / 3]);
});

test('KL loss term and entropy bonus join the total', () => {
  const inp = {
    logprobs: [0, 0],
    oldLogprobs: t([0, 0]),
    advantages: t([0, 0]),
    mask: t([1, 1]),
    refLogprobs: t([-1, 0]),
  };
  // k3 at x = 1: e^{-1} − 1 + 1 = e^{-1}; mean over 2 tokens
  near([lossAndGrad(inp, { klLossCoef: 0.5, klEstimator: 'k3' }).loss], [(0.5 * Math.exp(-1)) / 2]);
  const logits = t([
    [0, 0],
    [0, 0],
  ]);
  const entropy = entropyFromLogits(logits);
  near(entropy.dataSync(), [Math.LN2, Math.LN2]);
  near([lossAndGrad({ ...inp, entropy }, { entropyLossCoef: 0.1 }).loss], [-0.1 * Math.LN2]);
  throwsCode(
    () => ppoActorLoss({ ...inp, logprobs: t([0, 0]) }, { entropyLossCoef: 0.1 }),
    'SHAPE_MISMATCH',
    'entropy',
  );
  throwsCode(
    () =>
      ppoActorLoss({ ...inp, logprobs: t([0, 0]), refLogprobs: undefined }, { klLossCoef: 0.1 }),
    'SHAPE_MISMATCH',
    '--use-kl-loss',
  );
});

test('entropy gradient flows into the logits', () => {
  const g = tf.grad((z: tf.Tensor) => tf.sum(entropyFromLogits(z)))(t([[1, 0, 0]]));
  // maximising entropy pushes the large logit down: its gradient is negative
  assert.ok((g.dataSync()[0] as number) < 0);
});

test('fully masked rows contribute nothing and an all-masked batch gives 0', () => {
  const inp = {
    logprobs: [
      [0.1, 0.2],
      [5, 5],
    ],
    oldLogprobs: t([
      [0, 0],
      [0, 0],
    ]),
    advantages: t([
      [1, 1],
      [9, 9],
    ]),
    mask: t([
      [1, 1],
      [0, 0],
    ]),
  };
  const a = lossAndGrad(inp);
  near([a.loss], [-(Math.exp(0.1) + Math.min(Math.exp(0.2), 1.2)) / 2]);
  near(a.grad.slice(2), [0, 0]);
  const z = lossAndGrad({
    ...inp,
    mask: t([
      [0, 0],
      [0, 0],
    ]),
  });
  near([z.loss], [0]);
});

test('statistics: clip fraction and approx KL', () => {
  const b = base();
  const s = policyLossStats({ ...b, logprobs: t(b.logprobs) });
  near([s.clipFraction, s.tokens], [0.75, 4]);
  near([s.approxKl], [-(Math.log(1.5) + Math.log(0.5) + Math.log(1.1) + Math.log(0.7)) / 4]);
});

test('loss with statistics: the same loss and gradient as ppoActorLoss, the same statistics as policyLossStats, from one forward', () => {
  const b = base();
  const inp = {
    ...b,
    behaviourLogprobs: t([0.1, -0.2, 0, 0.3]),
    refLogprobs: t([-0.1, 0, 0.2, 0]),
    entropy: t([1, 2, 3, 4]),
  };
  const opts: PpoLossOptions = {
    dualClip: 3,
    useDecoupledLoss: true,
    klLossCoef: 0.1,
    klEstimator: 'k3',
    entropyLossCoef: 0.01,
  };
  const lp = t(b.logprobs);
  let sums: tf.Tensor | undefined;
  const withStats = tf.valueAndGrad((x: tf.Tensor) => {
    const ev = ppoActorLossWithStats({ ...inp, logprobs: x }, opts);
    sums = tf.keep(ev.sums);
    return ev.loss;
  })(lp);
  const plain = tf.valueAndGrad((x: tf.Tensor) => ppoActorLoss({ ...inp, logprobs: x }, opts))(lp);
  assert.is(withStats.value.dataSync()[0], plain.value.dataSync()[0]);
  assert.equal(Array.from(withStats.grad.dataSync()), Array.from(plain.grad.dataSync()));
  assert.equal(
    readPolicyLossStats(sums!.dataSync()),
    policyLossStats({ ...inp, logprobs: lp }, opts),
  );
});

test('loss with statistics: non-finite inputs show in the sums, and reading them throws naming the input', () => {
  const b = base();
  const ev = ppoActorLossWithStats({
    ...b,
    logprobs: t(b.logprobs),
    refLogprobs: t([0, NaN, 0, 0]),
  });
  throwsCode(() => readPolicyLossStats(ev.sums.dataSync()), 'NON_FINITE_INPUT', 'refLogprobs');
  const off = ppoActorLossWithStats(
    { ...b, logprobs: t(b.logprobs), advantages: t([1, Infinity, 1, 1]) },
    { checkFinite: false },
  );
  assert.is(readPolicyLossStats(off.sums.dataSync()).tokens, 4, 'unchecked with checkFinite off');
});

test('NaN/Inf inputs and bad options are rejected', () => {
  const b = base();
  throwsCode(
    () => ppoActorLoss({ ...b, logprobs: t(b.logprobs), advantages: t([1, NaN, 1, 1]) }),
    'NON_FINITE_INPUT',
    'advantages',
  );
  throwsCode(
    () => ppoActorLoss({ ...b, logprobs: t(b.logprobs), oldLogprobs: t([0, Infinity, 0, 0]) }),
    'NON_FINITE_INPUT',
    'oldLogprobs',
  );
  throwsCode(() => resolvePpoLossOptions({ dualClip: 1 }), 'INVALID_OPTION', '--dual-clip');
  throwsCode(() => resolvePpoLossOptions({ epsClip: -0.1 }), 'INVALID_OPTION', '--eps-clip');
  throwsCode(
    () => resolvePpoLossOptions({ useDecoupledLoss: true, isCorrection: 'tis' }),
    'INVALID_OPTION',
    '--is-correction',
  );
  throwsCode(
    () => resolvePpoLossOptions({ lossAggMode: 'seq-mean-token-sum-norm' }),
    'INVALID_OPTION',
    '--loss-agg-mode',
  );
  assert.is(resolvePpoLossOptions({ epsClip: 0.1 }).epsClipHigh, 0.1);
});

test('no tensors leak from a loss evaluation', () => {
  const b = base();
  const lp = t(b.logprobs);
  const before = tf.memory().numTensors;
  const l = ppoActorLoss({ ...b, logprobs: lp }, { dualClip: 3 });
  l.dispose();
  assert.is(tf.memory().numTensors, before);
});

test.run();
