/**
 * The step loop the trainer and the critic share: for each epoch, one optimizer step per
 * `trainBatchSize` samples (steps without a trained token skipped), the step's per-token loss
 * weights from the whole step (so micro-batch boundaries do not change the loss), and its
 * micro-batches; then the micro-batches accumulated with a turn for the event loop between them.
 *
 * @module
 */
import { setImmediate } from 'node:timers/promises';
import type { AggregationOptions } from '../algorithms/loss-aggregation.ts';
import { lossWeights, type MicroBatch } from '../algorithms/packing.ts';
import { shuffle } from '../algorithms/shuffle.ts';

/** What a step needs of a sample. */
export interface StepSample {
  inputIds: ArrayLike<number>;
  actionMask: ArrayLike<number>;
}

/** One optimizer step's share of the samples. */
export interface OptimizerStep<S> {
  samples: S[];
  /** Per-token loss weights of each sample, from the whole step. */
  weights: Float32Array[];
  /** Micro-batches, as indices into `samples`. */
  cuts: MicroBatch[];
  /** Trained (action) tokens in the step. */
  tokens: number;
}

/** Options of {@link optimizerSteps}. */
export interface OptimizerStepsOptions {
  epochs: number;
  trainBatchSize: number;
  agg: AggregationOptions;
  /** Cuts a step into micro-batches by sample length (the data-parallel rank's share). */
  microBatches: (lengths: number[]) => MicroBatch[];
  /** Seed of the sample order of each epoch after the first; without it every epoch keeps the given order. */
  shuffleSeed?: (epoch: number) => number;
}

/**
 * The optimizer steps over `samples`, epoch by epoch.
 *
 * @example
 * for (const step of optimizerSteps(samples, { epochs: 1, trainBatchSize: 8, agg, microBatches })) {
 *   await accumulateMicroBatches(opt, step, async (micro, weights) => { ... });
 *   await opt.stepAsync();
 * }
 */
export function* optimizerSteps<S extends StepSample>(
  samples: readonly S[],
  o: OptimizerStepsOptions,
): Generator<OptimizerStep<S>> {
  for (let epoch = 0; epoch < o.epochs; epoch++) {
    const order = samples.map((_, i) => i);
    if (epoch > 0 && o.shuffleSeed) shuffle(order, o.shuffleSeed(epoch));
    for (let s = 0; s < order.length; s += o.trainBatchSize) {
      const step = order.slice(s, s + o.trainBatchSize).map((i) => samples[i]!);
      const tokens = step.reduce((n, x) => n + countActions(x.actionMask), 0);
      if (tokens === 0) continue;
      const weights = lossWeights(
        step.map((x) => x.actionMask),
        o.agg,
      );
      const cuts = o.microBatches(step.map((x) => x.inputIds.length));
      yield { samples: step, weights, cuts, tokens };
    }
  }
}

/**
 * Runs `accumulate` on each micro-batch of `step` (its samples and their loss weights), giving
 * the event loop a turn after each, so a long step never starves the worker's heartbeats. A
 * micro-batch that throws (non-finite inputs) zeroes the gradients of the earlier ones, so the
 * next step does not apply them.
 */
export async function accumulateMicroBatches<S>(
  opt: { zeroGrad(): void },
  step: OptimizerStep<S>,
  accumulate: (micro: S[], weights: Float32Array[]) => void | Promise<void>,
): Promise<void> {
  try {
    for (const cut of step.cuts) {
      await accumulate(
        cut.indices.map((i) => step.samples[i]!),
        cut.indices.map((i) => step.weights[i]!),
      );
      await setImmediate(); // timers and socket messages (heartbeats) run here
    }
  } catch (e) {
    opt.zeroGrad();
    throw e;
  }
}

function countActions(mask: ArrayLike<number>): number {
  let n = 0;
  for (let i = 0; i < mask.length; i++) n += mask[i]!;
  return n;
}
