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
import type { tf } from '../model/backend.ts';
import { backendDescription } from '../model/backend.ts';
import { loadModel, saveModel } from '../model/checkpoint.ts';
import { writeLoraAdapter } from '../model/lora-adapter.ts';
import { attachLoraSpec, type LoraSpec } from '../model/lora-spec.ts';
import type { SaveDtype } from '../model/config.ts';
import type { CausalLM } from '../model/llama.ts';
import { ModelTrainer, tokenStats } from '../model/training.ts';
import { nextTokenLogprobs } from '../model/sequence-logprobs.ts';
import type { LrScheduleOptions } from '../model/lr-schedule.ts';
import type { PolicyWeights } from '../engines/types.ts';
import { weightsDigest } from '../model/digest.ts';
import { put, release, type ObjectRef } from '../runtime/api.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';
import {
  ppoActorLossWithStats,
  readPolicyLossStats,
  resolvePpoLossOptions,
  type PolicyLossInputs,
  type ResolvedPpoLossOptions,
} from '../algorithms/policy-loss.ts';
import { rolloutCorrectionStats } from '../algorithms/rollout-correction.ts';
import { stalenessStats } from '../algorithms/staleness.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';
import { DataParallelRank, type DataParallelInit } from './data-parallel.ts';
import type { ZeroStage } from '../model/zero-optimizer.ts';
import { experienceOf, fetchSequences, type RewardStats, type StepBatch } from './experience.ts';
import { handOff, type Handoff } from './handoff.ts';
import { microBatchLayout } from './micro-batch.ts';
import { accumulateMicroBatches, optimizerSteps } from './optimizer-steps.ts';

/** One training sample (a trajectory after experience making). */
export interface TrainSample {
  inputIds: ArrayLike<number>;
  /** 1 where token i+1 is an action. */
  actionMask: ArrayLike<number>;
  advantages: ArrayLike<number>;
  /**
   * The PPO ratio's anchor: the policy's logprobs before this update (the behaviour logprobs when
   * the engine ran the current weights), or the proximal policy's under decoupled PPO.
   */
  oldLogprobs: ArrayLike<number>;
  /** Logprobs of the policy that generated the tokens; needed by decoupled PPO and IS correction. */
  behaviourLogprobs?: ArrayLike<number>;
  /** Reference logprobs for the KL loss. */
  refLogprobs?: ArrayLike<number>;
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
  /**
   * The policy loss, resolved (`resolvePpoLossOptions` of the public `PpoLossOptions`, as
   * `train_ppo` compiles its flags once): the trainer takes it as it is. @default the library's
   * defaults
   */
  loss?: ResolvedPpoLossOptions;
  /** Token budget per micro-batch (`--train-max-tokens-per-gpu`); unset cuts by sample count. */
  trainMaxTokensPerGpu?: number;
  /** Sampling temperature, so recomputed logprobs match the engine's. @default 1 */
  temperature?: number;
  /** The learning rate's schedule over the run's optimizer steps; unset keeps it constant. */
  lrSchedule?: Omit<LrScheduleOptions, 'lr'>;
  /** AdamW's decoupled weight decay (`--l2`; not on norms and biases). @default 0 */
  weightDecay?: number;
  /** Shuffles micro-batch order across epochs. @default 0 */
  seed?: number;
  /** Tensor dtype of the HF policy `saveHf` writes (checkpoints stay float32). @default 'float32' */
  saveDtype?: SaveDtype;
  /** This trainer's data-parallel rank (`--actor-num-replicas`); absent trains alone. */
  dataParallel?: DataParallelInit;
  /**
   * Train a LoRA adapter over the frozen base (`--lora-rank`, `--load-lora`): only the adapter
   * trains, is checkpointed and is published to the engines, and the base is the reference.
   */
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
  /** Where this call's time went, in milliseconds, summed over its optimizer steps. */
  timing: TrainTiming;
  /**
   * Share of the positions the ranks computed that were padding (each micro-batch is padded to its
   * longest sequence, unless `--packing-samples`): what packing and length sorting save.
   */
  paddingFraction: number;
}

/**
 * Where a {@link Trainer.train} call spent its time. With data parallelism `computeMs` is the
 * slowest rank's, `imbalanceMs` how long the fastest waited for it, and `allreduceMs` the rest of
 * the all-reduce (moving and summing gradients), as rank 0 saw it.
 */
export interface TrainTiming {
  /** Forward and backward passes over the micro-batches (the slowest rank's). */
  computeMs: number;
  /** Slowest minus fastest rank's compute: what the faster rank waits before the all-reduce. */
  imbalanceMs: number;
  /** The gradient all-reduce beyond waiting for the slowest rank. */
  allreduceMs: number;
  /** Optimizer steps (clip and AdamW). */
  optimizerMs: number;
}

/** What {@link Trainer.trainStep} reports: the update's statistics and its batch's, in numbers. */
export interface StepStats extends TrainStats {
  /** Mean reward of the batch (the reward model's scores with `--reward-pretrain`). */
  rewardMean: number;
  /** Batch mean of each sample's masked-mean KL to the reference: what the KL controller is fed. */
  kl: number;
  /** Mean action tokens per sample. */
  responseLength: number;
  /** Staleness per token against the version before this update. */
  staleMean: number;
  staleMax: number;
  samples: number;
  /** Fetching the batch and making its experience, in milliseconds. */
  experienceMs: number;
  /** Train–inference mismatch and what the rollout correction did with it, when recomputed. */
  mismatch?: Record<string, number>;
  /** On-policy distillation: mean log π_student − log π_teacher over action tokens. */
  opdReverseKl?: number;
  /** The reward statistics after this step (`--normalize-reward`). */
  rewardStats?: RewardStats;
}

/** The policy trainer. Call {@link Trainer.ready} once before anything else. */
export class Trainer {
  /**
   * The methods every data-parallel rank runs (they meet in collectives, or change every rank's
   * state); the rest run on rank 0, whose state every rank shares. The driver's view of N ranks
   * (`replicated` in `train/ppo/roles.ts`) reads this, as verl's `@register` declares dispatch
   * on the method's class.
   */
  static readonly everyRank = [
    'ready',
    'train',
    'trainStep',
    'loadCheckpoint',
    // Every rank gathers its optimizer shards into the checkpoint (ZeRO); rank 0 writes it.
    'saveCheckpoint',
  ] as const satisfies readonly (keyof Trainer)[];

  private model!: CausalLM;
  private opt!: ModelTrainer;
  private dp!: DataParallelRank;
  private readonly init: TrainerInit;
  private readonly loss: ResolvedPpoLossOptions;
  private loaded: Promise<void> | undefined;
  /** The weights last shared with the engines ({@link shareWeights}). */
  private shared: { version: number; weights: ObjectRef<PolicyWeights> } | undefined;
  private sharedBefore: { version: number; weights: ObjectRef<PolicyWeights> } | undefined;
  /** Weight version: 0 for the initial policy, +1 per {@link train} call. */
  version = 0;

  constructor(init: TrainerInit) {
    this.init = init;
    this.loss = init.loss ?? resolvePpoLossOptions();
  }

  /**
   * Loads the policy and the optimizer and, with data parallelism, joins the other ranks (every
   * rank must call it); returns the parameter count.
   */
  async ready(): Promise<{ numParameters: number; backend: string }> {
    this.loaded ??= (async () => {
      const { model } = await loadModel(this.init.pretrain);
      // Every rank attaches the same adapter: a new one is seeded alike on every rank.
      if (this.init.lora) attachLoraSpec(model, this.init.lora);
      this.dp = await DataParallelRank.join(this.init.dataParallel);
      this.model = model;
      model.gradientCheckpointing = this.init.gradientCheckpointing ?? false;
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

  /** Next-token logprob rows of each sequence under the current policy (length L−1). */
  logprobs(seqs: number[][], microBatchSize = 16): Promise<number[][]> {
    return nextTokenLogprobs(this.model, seqs, {
      temperature: this.init.temperature ?? 1,
      microBatchSize,
    });
  }

  /**
   * The reference policy's logprob rows (length L−1) when the policy is a LoRA adapter: the base
   * model, i.e. this model with the adapter left out. No reference role, and no second copy of
   * the weights, is needed then.
   */
  referenceLogprobs(seqs: number[][], microBatchSize = 16): Promise<number[][]> {
    if (!this.model.lora)
      throw new InvalidArgumentError(
        'referenceLogprobs: the policy has no LoRA adapter (the reference role serves full fine-tuning)',
      );
    // The passes run within the call (only the read-back is asynchronous), so all without LoRA.
    return this.model.withoutLora(() => this.logprobs(seqs, microBatchSize));
  }

  /**
   * The policy's own logprob rows of `seqs` before an update (decoupled PPO, rollout
   * correction), with data parallelism computed once over the ranks: each rank runs its share
   * and every rank gets every row (`DataParallelRank.shareRows`). Every rank must call it.
   */
  async oldLogprobs(seqs: number[][]): Promise<number[][]> {
    return this.dp.shareRows(
      seqs,
      (s) => Math.max(0, s.length - 1),
      async (mine) => {
        this.recomputedRows += mine.length;
        return this.logprobs(mine);
      },
    );
  }

  /** Rows of old logprobs this rank has computed ({@link oldLogprobs}: with data parallelism its share). */
  private recomputedRows = 0;

  /** How many rows of old logprobs this rank has computed (its share with data parallelism). */
  getRecomputedRows(): number {
    return this.recomputedRows;
  }

  /** {@link logprobs} of the sequences of `batches` (fetched from the rollouts), handed off. */
  async logprobsOf(batches: Handoff<Trajectory[]>[]): Promise<Handoff<number[][]>> {
    return handOff(await this.logprobs(await fetchSequences(batches)));
  }

  /** {@link referenceLogprobs} of the sequences of `batches`, handed off. */
  async referenceLogprobsOf(batches: Handoff<Trajectory[]>[]): Promise<Handoff<number[][]>> {
    return handOff(await this.referenceLogprobs(await fetchSequences(batches)));
  }

  /**
   * One policy update from references: fetches the step's trajectories (and the reference
   * logprobs, values and teacher logprobs handed to it), makes the experience
   * (`experience.ts`, as the critic does), recomputes its own logprobs when the config asks, and
   * {@link train}s. Every data-parallel rank runs it on the same references.
   */
  async trainStep(step: StepBatch): Promise<StepStats> {
    const t0 = performance.now();
    const before = this.version;
    const x = await experienceOf(step, (seqs) => this.oldLogprobs(seqs));
    const { samples, batch, old } = x;
    const train: TrainSample[] = samples.map((s, i) => ({
      inputIds: s.inputIds,
      actionMask: s.actionMask,
      advantages: batch.advantages[i]!,
      // Without a recompute the engine ran the weights being trained (sync), so its behaviour
      // logprobs are the old policy's.
      oldLogprobs: old ? old[i]! : s.behaviourLogprobs,
      ...(old ? { behaviourLogprobs: s.behaviourLogprobs } : {}),
      ...(x.refLogprobs ? { refLogprobs: x.refLogprobs[i]! } : {}),
    }));
    const t1 = performance.now();
    const stats = await this.train(train);
    const stale = stalenessStats(
      samples.map((s) => ({ lossMask: s.actionMask, versions: s.versions })),
      before,
    );
    const n = Math.max(1, samples.length);
    return {
      ...stats,
      rewardMean: x.trajectories.reduce((a, t) => a + t.reward, 0) / n,
      kl: batch.meanKl,
      responseLength: samples.reduce((a, s) => a + s.responseLength, 0) / n,
      staleMean: stale.mean,
      staleMax: stale.max,
      samples: samples.length,
      experienceMs: t1 - t0,
      ...(old ? { mismatch: rolloutCorrectionStats(samples, old, this.init.loss) } : {}),
      ...(x.opdReverseKl !== undefined ? { opdReverseKl: x.opdReverseKl } : {}),
      ...(x.rewardStats ? { rewardStats: x.rewardStats } : {}),
    };
  }

  /**
   * Trains on `samples` for `maxEpochs`, one optimizer step per `trainBatchSize` samples, each
   * accumulated over micro-batches; the loss is a token mean over the whole optimizer step, so
   * micro-batch boundaries do not change it. Micro-batches are cut from the step's samples sorted
   * by length (less padding), and the event loop gets a turn between micro-batches, so a long step
   * never starves the worker's heartbeats. With data parallelism every rank gets the same
   * `samples`, runs its share of about equal cost and the ranks sum gradients before each optimizer
   * step. Bumps the version.
   */
  async train(samples: TrainSample[]): Promise<TrainStats> {
    const { trainBatchSize, microTrainBatchSize } = this.init;
    const epochs = this.init.maxEpochs ?? 1;
    const acc = { loss: 0, clip: 0, kl: 0, ent: 0, tokens: 0, gradNorm: 0, steps: 0, lr: 0 };
    const positions = { real: 0, padded: 0 };
    const timing: TrainTiming = { computeMs: 0, imbalanceMs: 0, allreduceMs: 0, optimizerMs: 0 };
    const steps = optimizerSteps(samples, {
      epochs,
      trainBatchSize,
      agg: this.loss,
      microBatches: (lengths) =>
        this.dp.microBatches(lengths, {
          maxSamples: microTrainBatchSize,
          ...(this.init.trainMaxTokensPerGpu ? { maxTokens: this.init.trainMaxTokensPerGpu } : {}),
        }),
      shuffleSeed: (epoch) => (this.init.seed ?? 0) + 7919 * this.version + epoch,
    });
    for (const step of steps) {
      const local = { loss: 0, clip: 0, kl: 0, ent: 0, real: 0, padded: 0 };
      const c0 = performance.now();
      await accumulateMicroBatches(this.opt, step, async (micro, w) => {
        const lengths = micro.map((x) => x.inputIds.length);
        const real = lengths.reduce((a, b) => a + b, 0);
        local.real += real;
        // A packed micro-batch is one row of exactly its tokens: no padding.
        local.padded += this.init.packingSamples ? real : micro.length * Math.max(0, ...lengths);
        // Loss, statistics and input checks come back in one read per micro-batch.
        const r = await this.opt.accumulateAsync(
          () => this.microBatchLoss(micro, w),
          readPolicyLossStats,
        );
        local.loss += r.loss;
        local.clip += r.extras.clipFraction * r.extras.tokens;
        local.kl += r.extras.approxKl * r.extras.tokens;
        local.ent += r.extras.entropy * r.extras.tokens;
      });
      const c1 = performance.now();
      const { stats, computeMs } = await this.dp.reduce(this.opt, [
        local.loss,
        local.clip,
        local.kl,
        local.ent,
        // Positions over every rank, so each rank reports the step's padding share alike.
        local.real,
        local.padded,
      ]);
      const [loss = 0, clip = 0, kl = 0, ent = 0, real = 0, padded = 0] = stats;
      positions.real += real;
      positions.padded += padded;
      const c2 = performance.now();
      const slowest = Math.max(...computeMs);
      timing.computeMs += slowest;
      timing.imbalanceMs += slowest - Math.min(...computeMs);
      timing.allreduceMs += Math.max(0, c2 - c1 - (slowest - (c1 - c0)));
      acc.loss += loss;
      acc.clip += clip;
      acc.kl += kl;
      acc.ent += ent;
      const st = await this.opt.stepAsync({ scale: 1 });
      timing.optimizerMs += performance.now() - c2;
      acc.tokens += step.tokens;
      acc.gradNorm += st.gradNorm;
      acc.lr = st.lr;
      acc.steps++;
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
      timing,
      paddingFraction: positions.padded ? 1 - positions.real / positions.padded : 0,
    };
  }

  /**
   * One micro-batch's share of the step's loss: the library's PPO loss with per-token weights
   * from the whole step (`lossWeights`), so the micro-batch split does not change the gradient;
   * with the sums of its statistics from the same forward as `extras`.
   */
  private microBatchLoss(
    micro: TrainSample[],
    weights: Float32Array[],
  ): { loss: tf.Scalar; extras: tf.Tensor } {
    const layout = microBatchLayout(
      micro.map((x) => Array.from(x.inputIds)),
      this.init.packingSamples ?? false,
    );
    const rows = (get: (x: TrainSample, i: number) => ArrayLike<number> | undefined): tf.Tensor2D =>
      layout.rows(micro.map((x, i) => get(x, i) ?? []));
    const st = tokenStats(this.model, layout.ids, {
      temperature: this.init.temperature ?? 1,
      entropy: true,
      ...(layout.packed ? { packed: layout.packed } : {}),
    });
    const inputs: PolicyLossInputs = {
      logprobs: st.logprobs,
      oldLogprobs: rows((x) => x.oldLogprobs),
      advantages: rows((x) => x.advantages),
      mask: rows((x) => x.actionMask),
      weights: rows((_, i) => weights[i]),
      ...(st.entropy ? { entropy: st.entropy } : {}),
      ...(micro[0]?.behaviourLogprobs
        ? { behaviourLogprobs: rows((x) => x.behaviourLogprobs) }
        : {}),
      ...(micro[0]?.refLogprobs ? { refLogprobs: rows((x) => x.refLogprobs) } : {}),
    };
    const { loss, sums } = ppoActorLossWithStats(inputs, this.loss);
    return { loss, extras: sums };
  }

  /** The weight version, without the weights (what the driver needs to measure staleness). */
  getVersion(): number {
    return this.version;
  }

  /**
   * The current weights, as a value (in-process engines; inside a cluster see {@link shareWeights}):
   * with LoRA the adapter alone (a few MB), which the engines apply over their base.
   */
  async weights(): Promise<PolicyWeights> {
    await this.model.readToHost();
    const lora = this.model.lora;
    if (lora) return { version: this.version, adapter: lora.exportAdapter() };
    return { version: this.version, tensors: this.model.exportWeights() };
  }

  /**
   * The current weights as an object this trainer owns (`put` once per version): the driver
   * passes the ref on and each engine fetches the bytes from here, so they never pass through the
   * driver, and the engines of one node share one shared-memory copy. Two versions are kept: the
   * one before is released when a third is shared.
   * Needs the runtime (an actor, or a process that called `init`).
   */
  async shareWeights(): Promise<{ version: number; weights: ObjectRef<PolicyWeights> }> {
    if (this.shared?.version !== this.version) {
      const weights = await this.weights();
      // Another call may have shared this version while the weights were read.
      if (this.shared?.version !== weights.version) {
        // The version before stays: async engines (and a rollout restarted meanwhile) still load
        // it while this one is staged.
        if (this.sharedBefore) release(this.sharedBefore.weights);
        this.sharedBefore = this.shared;
        this.shared = { version: weights.version, weights: put(weights) };
      }
    }
    // Wrapped: a bare ref as a result would be awaited (fetched) by the caller as a thenable.
    return { ...this.shared };
  }

  /** The version and a SHA-256 of the current weights (`model/digest.ts`). */
  async weightsDigest(): Promise<{ version: number; sha256: string }> {
    await this.model.readToHost();
    const lora = this.model.lora;
    const tensors = lora ? lora.exportAdapter().tensors : this.model.exportWeights();
    return { version: this.version, sha256: weightsDigest(tensors) };
  }

  /** Saves weights, optimizer state and `extra` (data position, RNG, ...) under `dir`. */
  async saveCheckpoint(dir: string, extra: Record<string, unknown>): Promise<void> {
    await this.opt.readToHost();
    if (this.dp.rank > 0) return;
    this.opt.saveCheckpoint(
      dir,
      { ...extra, version: this.version },
      { tokenizerFrom: this.init.pretrain },
    );
  }

  /** Restores a {@link saveCheckpoint}; returns its `extra`. */
  loadCheckpoint(dir: string): Record<string, unknown> {
    const state = this.opt.loadCheckpoint(dir);
    this.version = Number(state['version'] ?? 0);
    return state;
  }

  /**
   * Writes the policy as an HF model directory; with LoRA as a PEFT adapter directory (the base,
   * named in `adapter_config.json`, is never written; `rtjob merge-lora` makes a full model).
   */
  async saveHf(dir: string): Promise<void> {
    await this.model.readToHost();
    const lora = this.model.lora;
    if (lora) return writeLoraAdapter(dir, lora.exportAdapter());
    saveModel(dir, this.model, { tokenizerFrom: this.init.pretrain, dtype: this.init.saveDtype });
  }

  dispose(): void {
    if (this.shared) release(this.shared.weights);
    this.shared = undefined;
    this.dp?.leave();
    this.opt?.dispose();
    this.model?.dispose();
  }
}
