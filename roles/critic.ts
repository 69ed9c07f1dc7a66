/**
 * The Critic role (only with `--advantage-estimator gae`): the policy's trunk plus a scalar value
 * head, trained on the clipped value loss. Values are rows aligned to next-token logprobs (as in
 * `algorithms/experience.ts`): row position i is the value of the state before token i+1.
 *
 * @module
 */
import type { tf } from '../model/backend.ts';
import { backendDescription } from '../model/backend.ts';
import { loadModel } from '../model/checkpoint.ts';
import type { CausalLM } from '../model/llama.ts';
import { attachLoraSpec, type LoraSpec } from '../model/lora-spec.ts';
import { ModelTrainer, tokenStats } from '../model/training.ts';
import { forwardLogprobs } from '../model/sequence-logprobs.ts';
import type { LrScheduleOptions } from '../model/lr-schedule.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';
import type { LossAggregation } from '../algorithms/loss-aggregation.ts';
import { readValueLossChecks, valueLoss } from '../algorithms/value-loss.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';
import { DataParallelRank, type DataParallelInit } from './data-parallel.ts';
import type { ZeroStage } from '../model/zero-optimizer.ts';
import { experienceOf, fetchSequences, type StepBatch } from './experience.ts';
import { handOff, type Handoff } from './handoff.ts';
import { microBatchLayout } from './micro-batch.ts';
import { accumulateMicroBatches, optimizerSteps } from './optimizer-steps.ts';

/** How the Critic is built. */
export interface CriticInit {
  /** HF model directory; the value head starts at zero when it has none. */
  pretrain: string;
  learningRate: number;
  trainBatchSize: number;
  microTrainBatchSize: number;
  /** @default 1 */
  maxEpochs?: number;
  /** Value clip range (`--value-clip`). @default 0.5 */
  valueClip?: number;
  /** How token losses are averaged (`--loss-agg-mode`). @default 'token-mean' */
  lossAggMode?: LossAggregation;
  /** C of `seq-mean-token-sum-norm` (the generation limit). */
  lossNormConstant?: number;
  /** Token budget per micro-batch (`--train-max-tokens-per-gpu`); unset cuts by sample count. */
  trainMaxTokensPerGpu?: number;
  /** @default 1 */
  maxNorm?: number;
  /** The learning rate's schedule over the run's optimizer steps; unset keeps it constant. */
  lrSchedule?: Omit<LrScheduleOptions, 'lr'>;
  /** AdamW's decoupled weight decay (`--l2`; not on norms and biases). @default 0 */
  weightDecay?: number;
  /** This critic's data-parallel rank (`--critic-num-replicas`); absent trains alone. */
  dataParallel?: DataParallelInit;
  /** Train a LoRA adapter over the frozen trunk; the value head still trains in full. */
  lora?: LoraSpec;
  /** Recompute each layer's activations in the backward pass (`--gradient-checkpointing`). */
  gradientCheckpointing?: boolean;
  /** Pack each micro-batch's sequences into one row instead of padding (`--packing-samples`). */
  packingSamples?: boolean;
  /**
   * Shard AdamW's state over the data-parallel ranks (`--zero_stage`: 1 the moments, 2 also the
   * gradients; model/zero-optimizer.ts). @default 0
   */
  zeroStage?: ZeroStage;
}

/** One critic training sample. */
export interface CriticSample {
  inputIds: ArrayLike<number>;
  actionMask: ArrayLike<number>;
  /** Values at experience time. */
  oldValues: ArrayLike<number>;
  returns: ArrayLike<number>;
}

/** Value model. Call {@link Critic.ready} once first. */
export class Critic {
  /** The methods every data-parallel rank runs; the rest run on rank 0 (see `Trainer.everyRank`). */
  static readonly everyRank = [
    'ready',
    'train',
    'trainStep',
    'loadCheckpoint',
    // Every rank gathers its optimizer shards into the checkpoint (ZeRO); rank 0 writes it.
    'saveCheckpoint',
  ] as const satisfies readonly (keyof Critic)[];

  private model!: CausalLM;
  private opt!: ModelTrainer;
  private dp!: DataParallelRank;
  private loaded: Promise<void> | undefined;
  constructor(private readonly init: CriticInit) {}

  async ready(): Promise<{ numParameters: number; backend: string }> {
    this.loaded ??= (async () => {
      const { model } = await loadModel(this.init.pretrain, { valueHead: true });
      if (this.init.lora) attachLoraSpec(model, this.init.lora);
      this.model = model;
      model.gradientCheckpointing = this.init.gradientCheckpointing ?? false;
      this.dp = await DataParallelRank.join(this.init.dataParallel);
      this.opt = new ModelTrainer(model, {
        lr: this.init.learningRate,
        maxGradNorm: this.init.maxNorm ?? 1,
        ...(this.init.lrSchedule ?? { scheduler: 'constant' }),
        weightDecay: this.init.weightDecay ?? 0,
        ...this.dp.zeroOptions(this.init.zeroStage),
      });
    })();
    await this.loaded;
    return {
      numParameters: this.model.numParameters,
      backend: this.dp.describe(backendDescription()),
    };
  }

  /** Value rows (length L−1): position i is the state before token i+1. */
  async values(seqs: number[][], microBatchSize = 16): Promise<number[][]> {
    const raw = (await forwardLogprobs(this.model, seqs, { values: true, microBatchSize })).values!;
    return raw.map((r) => r.slice(0, r.length - 1));
  }

  /** {@link values} of the sequences of `batches` (fetched from the rollouts), handed off. */
  async valuesOf(batches: Handoff<Trajectory[]>[]): Promise<Handoff<number[][]>> {
    return handOff(await this.values(await fetchSequences(batches)));
  }

  /**
   * One critic update from references: fetches the step's trajectories and the values handed to
   * it, makes the same experience as the trainer (`experience.ts`) and {@link train}s on its
   * returns. Every data-parallel rank runs it on the same references.
   */
  async trainStep(
    step: StepBatch,
  ): Promise<{ valueLoss: number; optimizerSteps: number; lr: number }> {
    const { samples, batch, values } = await experienceOf(step);
    if (!values)
      throw new InvalidArgumentError('Critic.trainStep: the step carries no values (valuesOf)');
    return this.train(
      samples.map((s, i) => ({
        inputIds: s.inputIds,
        actionMask: s.actionMask,
        oldValues: values[i]!,
        returns: batch.returns[i]!,
      })),
    );
  }

  /**
   * Trains on the library's clipped value loss, one optimizer step per `trainBatchSize` samples,
   * with per-token weights from the whole step so micro-batches add up to the step's loss.
   * Returns the mean loss per optimizer step and the learning rate of the last one.
   */
  async train(
    samples: CriticSample[],
  ): Promise<{ valueLoss: number; optimizerSteps: number; lr: number }> {
    const agg = {
      lossAggMode: this.init.lossAggMode ?? 'token-mean',
      ...(this.init.lossNormConstant !== undefined
        ? { lossNormConstant: this.init.lossNormConstant }
        : {}),
    };
    let loss = 0;
    let steps = 0;
    let lr = 0;
    const batches = optimizerSteps(samples, {
      epochs: this.init.maxEpochs ?? 1,
      trainBatchSize: this.init.trainBatchSize,
      agg,
      microBatches: (lengths) =>
        this.dp.microBatches(lengths, {
          maxSamples: this.init.microTrainBatchSize,
          ...(this.init.trainMaxTokensPerGpu ? { maxTokens: this.init.trainMaxTokensPerGpu } : {}),
        }),
    });
    for (const step of batches) {
      let local = 0;
      await accumulateMicroBatches(this.opt, step, async (micro, weights) => {
        const r = await this.opt.accumulateAsync(() => {
          const layout = microBatchLayout(
            micro.map((x) => Array.from(x.inputIds)),
            this.init.packingSamples ?? false,
          );
          const rows = (get: (x: CriticSample, i: number) => ArrayLike<number>): tf.Tensor2D =>
            layout.rows(micro.map(get));
          const { packed } = layout;
          const { loss, checks } = valueLoss(
            {
              values: tokenStats(this.model, layout.ids, {
                values: true,
                ...(packed ? { packed } : {}),
              }).values!,
              oldValues: rows((x) => x.oldValues),
              returns: rows((x) => x.returns),
              mask: rows((x) => x.actionMask),
              weights: rows((_, i) => weights[i]!),
            },
            { ...agg, valueClip: this.init.valueClip ?? 0.5 },
          );
          return { loss, extras: checks };
        }, readValueLossChecks);
        local += r.loss;
      });
      loss += (await this.dp.reduce(this.opt, [local])).stats[0]!;
      lr = (await this.opt.stepAsync({ scale: 1 })).lr;
      steps++;
    }
    return { valueLoss: loss / Math.max(1, steps), optimizerSteps: steps, lr };
  }

  /** Saves the value model and its optimizer state under `dir` (an HF directory with a value head). */
  async saveCheckpoint(dir: string): Promise<void> {
    await this.opt.readToHost();
    if (this.dp.rank > 0) return;
    this.opt.saveCheckpoint(dir, { role: 'critic' }, { tokenizerFrom: this.init.pretrain });
  }

  /** Restores a {@link saveCheckpoint}. */
  loadCheckpoint(dir: string): void {
    this.opt.loadCheckpoint(dir);
  }

  dispose(): void {
    this.dp?.leave();
    this.opt?.dispose();
    this.model?.dispose();
  }
}
