/**
 * The Trainer role: holds the policy, computes the PPO loss over micro-batches, steps the
 * optimizer, and publishes weights with a version number. A plain class: the driver places it
 * through the runtime as an actor, and tests use it in-process.
 *
 * Per-token arrays in a {@link TrainSample} are rows aligned to next-token logprobs, as
 * `algorithms/experience.ts` makes them: row position i describes token i+1, so a sequence of L
 * tokens has rows of length L−1.
 *
 * @module
 */
import { setImmediate } from 'node:timers/promises';
import { tf } from './model/backend.ts';
import { loadModel, saveModel } from './model/checkpoint.ts';
import type { SaveDtype } from './model/config.ts';
import type { CausalLM } from './model/llama.ts';
import { forwardLogprobs, ModelTrainer, padBatch, tokenStats } from './model/training.ts';
import type { NamedTensors } from './engines/types.ts';

/** One training sample (a trajectory after experience making). */
export interface TrainSample {
  inputIds: ArrayLike<number>;
  /** 1 where token i+1 is an action. */
  actionMask: ArrayLike<number>;
  advantages: ArrayLike<number>;
  /** Logprobs the PPO ratio is taken against (recomputed, or behaviour when decoupled). */
  oldLogprobs: ArrayLike<number>;
  /** Proximal logprobs for the decoupled loss (trainer's policy before this step). */
  proxLogprobs?: ArrayLike<number>;
  /** Reference logprobs for the KL loss. */
  refLogprobs?: ArrayLike<number>;
}

/** Loss settings of the policy. */
export interface PolicyLossOptions {
  /** @default 0.2 */
  epsClip?: number;
  /** Upper clip (clip-higher). @default epsClip */
  epsClipHigh?: number;
  /** Dual-clip constant c > 1; off when unset. */
  dualClip?: number;
  /** KL-loss coefficient (with `refLogprobs`); 0 disables. @default 0 */
  klLossCoef?: number;
  /** @default 'k3' */
  klEstimator?: 'k1' | 'k2' | 'k3';
  /** Entropy bonus. @default 0 */
  entropyCoef?: number;
  /** Decoupled PPO: ratio against `proxLogprobs`, weighted by exp(prox − old) capped. @default false */
  decoupled?: boolean;
  /** Tokens whose behaviour importance weight exceeds this are masked (decoupled). @default 5 */
  behavImpWeightCap?: number;
}

/** How the Trainer is built. */
export interface TrainerInit {
  /** HF model directory of the initial policy. */
  pretrain: string;
  learningRate: number;
  /** Global gradient clip. @default 1 */
  maxNorm?: number;
  /** Samples per optimizer step. */
  trainBatchSize: number;
  /** Samples per micro-batch. */
  microTrainBatchSize: number;
  /** Passes over each batch. @default 1 */
  maxEpochs?: number;
  loss?: PolicyLossOptions;
  /** Sampling temperature, so recomputed logprobs match the engine's. @default 1 */
  temperature?: number;
  /** Total optimizer steps, for the LR schedule; 0 keeps it constant. @default 0 */
  totalSteps?: number;
  /** Shuffles micro-batch order across epochs. @default 0 */
  seed?: number;
  /** Tensor dtype of the HF policy `saveHf` writes (checkpoints stay float32). @default 'float32' */
  saveDtype?: SaveDtype;
}

/** What {@link Trainer.train} reports. */
export interface TrainStats {
  version: number;
  policyLoss: number;
  clipFraction: number;
  approxKl: number;
  entropy: number;
  gradNorm: number;
  optimizerSteps: number;
  tokens: number;
  lr: number;
}

/** The policy trainer. Call {@link Trainer.ready} once before anything else. */
export class Trainer {
  private model!: CausalLM;
  private opt!: ModelTrainer;
  private readonly init: TrainerInit;
  private loaded: Promise<void> | undefined;
  /** Weight version: 0 for the initial policy, +1 per {@link train} call. */
  version = 0;

  constructor(init: TrainerInit) {
    this.init = init;
  }

  /** Loads the policy and the optimizer; returns the parameter count. */
  async ready(): Promise<{ numParameters: number }> {
    this.loaded ??= (async () => {
      const { model } = await loadModel(this.init.pretrain);
      this.model = model;
      this.opt = new ModelTrainer(model, {
        lr: this.init.learningRate,
        maxGradNorm: this.init.maxNorm ?? 1,
        totalSteps: this.init.totalSteps ?? 0,
        decay: this.init.totalSteps ? 'cosine' : 'constant',
        weightDecay: 0,
      });
    })();
    await this.loaded;
    return { numParameters: this.model.numParameters };
  }

  /** Next-token logprob rows of each sequence under the current policy (length L−1). */
  logprobs(seqs: number[][], microBatchSize = 16): number[][] {
    const out = forwardLogprobs(this.model, seqs, { temperature: this.init.temperature ?? 1, microBatchSize });
    return out.logprobs.map((r) => r.slice(1));
  }

  /**
   * Trains on `samples` for `maxEpochs`, one optimizer step per `trainBatchSize` samples, each
   * accumulated over micro-batches; the loss is a token mean over the whole optimizer step, so
   * micro-batch boundaries do not change it. Micro-batches are cut from the step's samples sorted
   * by length (less padding), and the event loop gets a turn between micro-batches, so a long step
   * never starves the worker's heartbeats. Bumps the version.
   */
  async train(samples: TrainSample[]): Promise<TrainStats> {
    const { trainBatchSize, microTrainBatchSize } = this.init;
    const epochs = this.init.maxEpochs ?? 1;
    const acc = { loss: 0, clip: 0, kl: 0, ent: 0, tokens: 0, gradNorm: 0, steps: 0, lr: 0 };
    for (let epoch = 0; epoch < epochs; epoch++) {
      const order = samples.map((_, i) => i);
      if (epoch > 0) shuffle(order, (this.init.seed ?? 0) + 7919 * this.version + epoch);
      for (let s = 0; s < order.length; s += trainBatchSize) {
        const step = byLength(order.slice(s, s + trainBatchSize).map((i) => samples[i]!));
        const stepTokens = step.reduce((n, x) => n + countActions(x.actionMask), 0);
        if (stepTokens === 0) continue;
        for (let m = 0; m < step.length; m += microTrainBatchSize) {
          const micro = step.slice(m, m + microTrainBatchSize);
          const out = { clip: 0, kl: 0, ent: 0 };
          const loss = this.opt.accumulate(() => this.policyLoss(micro, stepTokens, out));
          acc.loss += loss;
          acc.clip += out.clip;
          acc.kl += out.kl;
          acc.ent += out.ent;
          await setImmediate(); // timers and socket messages (heartbeats) run here
        }
        const st = this.opt.step({ scale: 1 });
        acc.tokens += stepTokens;
        acc.gradNorm += st.gradNorm;
        acc.lr = st.lr;
        acc.steps++;
      }
    }
    this.version++;
    const tok = Math.max(1, acc.tokens);
    return {
      version: this.version,
      policyLoss: acc.loss / Math.max(1, acc.steps),
      clipFraction: acc.clip / tok,
      approxKl: acc.kl / tok,
      entropy: acc.ent / tok,
      gradNorm: acc.gradNorm / Math.max(1, acc.steps),
      optimizerSteps: acc.steps,
      tokens: acc.tokens / epochs,
      lr: acc.lr,
    };
  }

  /** The token-summed loss of one micro-batch divided by the step's token count. */
  private policyLoss(micro: TrainSample[], stepTokens: number, out: { clip: number; kl: number; ent: number }): tf.Scalar {
    const o = this.init.loss ?? {};
    const epsLow = o.epsClip ?? 0.2;
    const epsHigh = o.epsClipHigh ?? epsLow;
    const { ids, T } = padBatch(micro.map((x) => Array.from(x.inputIds)));
    const row = (get: (x: TrainSample) => ArrayLike<number> | undefined): tf.Tensor2D => {
      const data = new Float32Array(micro.length * (T - 1));
      micro.forEach((x, b) => {
        const a = get(x);
        if (a) for (let t = 0; t < Math.min(a.length, T - 1); t++) data[b * (T - 1) + t] = a[t]!;
      });
      return tf.tensor2d(data, [micro.length, T - 1]);
    };
    const mask = row((x) => x.actionMask);
    const adv = row((x) => x.advantages);
    const old = row((x) => x.oldLogprobs);
    const st = tokenStats(this.model, ids, { temperature: this.init.temperature ?? 1, entropy: true });
    const logp = st.logprobs;
    const base = o.decoupled ? row((x) => x.proxLogprobs ?? x.oldLogprobs) : old;
    const logRatio = tf.clipByValue(tf.sub(logp, base), -20, 20);
    const ratio = tf.exp(logRatio);
    const surr1 = tf.mul(ratio, adv);
    const surr2 = tf.mul(tf.clipByValue(ratio, 1 - epsLow, 1 + epsHigh), adv);
    let pg: tf.Tensor = tf.neg(tf.minimum(surr1, surr2));
    if (o.dualClip !== undefined) {
      const dual = tf.minimum(pg, tf.mul(adv, -o.dualClip));
      pg = tf.where(tf.less(adv, 0), dual, pg);
    }
    let weight: tf.Tensor = mask;
    if (o.decoupled) {
      const w = tf.exp(tf.clipByValue(tf.sub(base, old), -20, 20));
      const keep = tf.cast(tf.lessEqual(w, o.behavImpWeightCap ?? 5), 'float32');
      weight = tf.mul(tf.mul(mask, keep), w);
    }
    let total: tf.Tensor = tf.sum(tf.mul(pg, weight));
    if ((o.klLossCoef ?? 0) > 0) {
      const ref = row((x) => x.refLogprobs);
      const x = tf.sub(logp, ref);
      const est = o.klEstimator ?? 'k3';
      const k = est === 'k1' ? x : est === 'k2' ? tf.div(tf.square(x), 2) : tf.add(tf.sub(tf.exp(tf.neg(x)), 1), x);
      total = tf.add(total, tf.mul(tf.sum(tf.mul(tf.clipByValue(k, -10, 10), mask)), o.klLossCoef!));
    }
    if ((o.entropyCoef ?? 0) > 0 && st.entropy) {
      total = tf.sub(total, tf.mul(tf.sum(tf.mul(st.entropy, mask)), o.entropyCoef!));
    }
    // Diagnostics, read without gradients.
    const clipped = tf.mul(tf.cast(tf.greater(tf.abs(tf.sub(ratio, 1)), epsLow), 'float32'), mask);
    out.clip += tf.sum(clipped).dataSync()[0]!;
    out.kl += tf.sum(tf.mul(tf.neg(logRatio), mask)).dataSync()[0]!;
    if (st.entropy) out.ent += tf.sum(tf.mul(st.entropy, mask)).dataSync()[0]!;
    return tf.div(total, stepTokens) as tf.Scalar;
  }

  /** The current weights, for engines. */
  weights(): { version: number; tensors: NamedTensors } {
    return { version: this.version, tensors: this.model.exportWeights() };
  }

  /** Saves weights, optimizer state and `extra` (data position, RNG, ...) under `dir`. */
  saveCheckpoint(dir: string, extra: Record<string, unknown>): void {
    this.opt.saveCheckpoint(dir, { ...extra, version: this.version }, { tokenizerFrom: this.init.pretrain });
  }

  /** Restores a {@link saveCheckpoint}; returns its `extra`. */
  loadCheckpoint(dir: string): Record<string, unknown> {
    const state = this.opt.loadCheckpoint(dir);
    this.version = Number(state['version'] ?? 0);
    return state;
  }

  /** Writes the policy as an HF model directory. */
  saveHf(dir: string): void {
    saveModel(dir, this.model, { tokenizerFrom: this.init.pretrain, dtype: this.init.saveDtype });
  }

  dispose(): void {
    this.opt?.dispose();
    this.model?.dispose();
  }
}

function countActions(mask: ArrayLike<number>): number {
  let n = 0;
  for (let i = 0; i < mask.length; i++) n += mask[i]!;
  return n;
}

/** Seeded Fisher–Yates (mulberry32). */
export function shuffle<T>(a: T[], seed: number): T[] {
  let s = seed >>> 0;
  const rand = (): number => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

/** A copy sorted by sequence length (Array sort is stable), so micro-batches pad less. */
export function byLength<T extends { inputIds: ArrayLike<number> }>(samples: T[]): T[] {
  return [...samples].sort((a, b) => a.inputIds.length - b.inputIds.length);
}
