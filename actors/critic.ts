/**
 * The Critic role (only with `--advantage-estimator gae`): the policy's trunk plus a scalar value
 * head, trained on the clipped value loss. Values are rows aligned to next-token logprobs (as in
 * `algorithms/experience.ts`): row position i is the value of the state before token i+1.
 *
 * @module
 */
import { setImmediate } from 'node:timers/promises';
import { tf } from './model/backend.ts';
import { loadModel } from './model/checkpoint.ts';
import type { CausalLM } from './model/llama.ts';
import { forwardLogprobs, ModelTrainer, padBatch, tokenStats } from './model/training.ts';
import { byLength } from './trainer.ts';

/** How the Critic is built. */
export interface CriticInit {
  /** HF model directory; the value head starts at zero when it has none. */
  pretrain: string;
  learningRate: number;
  trainBatchSize: number;
  microTrainBatchSize: number;
  /** @default 1 */
  maxEpochs?: number;
  /** Value clip range. @default 0.5 */
  valueClip?: number;
  /** @default 1 */
  maxNorm?: number;
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
  private model!: CausalLM;
  private opt!: ModelTrainer;
  private loaded: Promise<void> | undefined;
  constructor(private readonly init: CriticInit) {}

  async ready(): Promise<{ numParameters: number }> {
    this.loaded ??= loadModel(this.init.pretrain, { valueHead: true }).then(({ model }) => {
      this.model = model;
      this.opt = new ModelTrainer(model, { lr: this.init.learningRate, maxGradNorm: this.init.maxNorm ?? 1 });
    });
    await this.loaded;
    return { numParameters: this.model.numParameters };
  }

  /** Value rows (length L−1): position i is the state before token i+1. */
  values(seqs: number[][], microBatchSize = 16): number[][] {
    const raw = forwardLogprobs(this.model, seqs, { values: true, microBatchSize }).values!;
    return raw.map((r) => r.slice(0, r.length - 1));
  }

  /** Trains on the clipped value loss, token mean per optimizer step; returns the mean loss. */
  async train(samples: CriticSample[]): Promise<{ valueLoss: number; optimizerSteps: number }> {
    const clip = this.init.valueClip ?? 0.5;
    let loss = 0;
    let steps = 0;
    for (let epoch = 0; epoch < (this.init.maxEpochs ?? 1); epoch++) {
      for (let s = 0; s < samples.length; s += this.init.trainBatchSize) {
        const step = byLength(samples.slice(s, s + this.init.trainBatchSize));
        const tokens = step.reduce((n, x) => n + Array.from(x.actionMask).reduce((a, b) => a + b, 0), 0);
        if (tokens === 0) continue;
        for (let m = 0; m < step.length; m += this.init.microTrainBatchSize) {
          const micro = step.slice(m, m + this.init.microTrainBatchSize);
          loss += this.opt.accumulate(() => {
            const { ids, T } = padBatch(micro.map((x) => Array.from(x.inputIds)));
            const row = (get: (x: CriticSample) => ArrayLike<number>): tf.Tensor2D => {
              const data = new Float32Array(micro.length * (T - 1));
              micro.forEach((x, b) => data.set(Array.from(get(x)).slice(0, T - 1), b * (T - 1)));
              return tf.tensor2d(data, [micro.length, T - 1]);
            };
            const v = tokenStats(this.model, ids, { values: true }).values!;
            const mask = row((x) => x.actionMask);
            const old = row((x) => x.oldValues);
            const ret = row((x) => x.returns);
            const vClipped = tf.add(old, tf.clipByValue(tf.sub(v, old), -clip, clip));
            const l = tf.maximum(tf.square(tf.sub(vClipped, ret)), tf.square(tf.sub(v, ret)));
            return tf.div(tf.mul(tf.sum(tf.mul(l, mask)), 0.5), tokens) as tf.Scalar;
          });
          await setImmediate(); // heartbeats run between micro-batches
        }
        this.opt.step({ scale: 1 });
        steps++;
      }
    }
    return { valueLoss: loss / Math.max(1, steps), optimizerSteps: steps };
  }

  /** Saves the value model and its optimizer state under `dir` (an HF directory with a value head). */
  saveCheckpoint(dir: string): void {
    this.opt.saveCheckpoint(dir, { role: 'critic' }, { tokenizerFrom: this.init.pretrain });
  }

  /** Restores a {@link saveCheckpoint}. */
  loadCheckpoint(dir: string): void {
    this.opt.loadCheckpoint(dir);
  }

  dispose(): void {
    this.opt?.dispose();
    this.model?.dispose();
  }
}
