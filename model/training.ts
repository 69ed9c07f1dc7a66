/**
 * Training building blocks: per-token logprobs and entropy (`token-stats.ts`, in-graph for losses),
 * AdamW with decoupled weight decay, gradient clipping by global norm, the learning-rate
 * schedules of `lr-schedule.ts`, gradient accumulation over micro-batches, and checkpoint
 * save/resume of weights + optimizer state + step. Every step runs inside `tf.tidy`, so `tf.memory().numTensors`
 * stays flat.
 *
 * @module
 */
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { assertBackendRoom, compileKernelsAhead, readToHost, tf } from './backend.ts';
import { adamwImpls, sumOfSquaresImpls } from './backend-ops.ts';
import { readCheckpointWeights, saveModel, type SaveModelOptions } from './checkpoint.ts';
import type { CausalLM } from './llama.ts';
import { isLoraAdapterDir } from './lora-adapter.ts';
import { loadLoraCheckpoint, saveLoraCheckpoint } from './lora-spec.ts';
import { trainingMemory } from './memory.ts';
import { parseSafetensors, serializeSafetensors } from './safetensors.ts';
import type { NamedTensors } from './tensors.ts';
import { ModelError } from './errors.ts';
import { learningRate, type LrScheduleOptions } from './lr-schedule.ts';
import { freeingGrads } from './recompute.ts';
import { ShardedAdamW, type ZeroSharding } from './zero-optimizer.ts';

export { padBatch, type PaddedBatch } from './batches.ts';

export { maskedNllLoss, tokenStats, type TokenStats } from './token-stats.ts';

/** Options of {@link ModelTrainer}. */
export interface TrainerOptions extends LrScheduleOptions {
  /** @default 0.9 */
  beta1?: number;
  /** @default 0.95 */
  beta2?: number;
  /** @default 1e-8 */
  eps?: number;
  /** Decoupled weight decay (not applied to norms and biases). @default 0.0 */
  weightDecay?: number;
  /** Clip the global gradient norm to this; 0 disables. @default 1.0 */
  maxGradNorm?: number;
  /** Train only parameters whose name passes this filter. */
  trainable?: (name: string) => boolean;
  /**
   * Shard AdamW's moments (stage 1) and the reduced gradients (stage 2) over a data-parallel
   * c10d group (`zero-optimizer.ts`); steps are then {@link ModelTrainer.stepAsync} alone, after
   * {@link ModelTrainer.reduceGradientShards} on every rank. @default unsharded
   */
  zero?: ZeroSharding;
}

/** What {@link ModelTrainer.step} reports. */
export interface StepStats {
  step: number;
  lr: number;
  /** Global gradient norm before clipping. */
  gradNorm: number;
  microBatches: number;
}

/** `ops` applied to `x` in turn, each intermediate freed as soon as the next exists. */
function chain(x: tf.Tensor, ...ops: ((t: tf.Tensor) => tf.Tensor)[]): tf.Tensor {
  let cur = x;
  for (const op of ops) {
    const next = op(cur);
    if (cur !== x) cur.dispose();
    cur = next;
  }
  return cur;
}

/** `dst.assign(t)`, then frees `t`'s own handle (the variable keeps the data). */
function assignFree(dst: tf.Variable, t: tf.Tensor): void {
  dst.assign(t);
  t.dispose();
}

/**
 * AdamW over a model's variables with gradient accumulation and clipping.
 *
 * @example
 * const trainer = new ModelTrainer(model, { lr: 1e-3, warmupSteps: 10, totalSteps: 1000 });
 * for (const mb of microBatches) trainer.accumulate(() => lossOf(mb));
 * trainer.step();   // averages the micro-batch gradients, clips, applies AdamW
 */
/** Numbers each {@link ModelTrainer}'s call site for `compileKernelsAhead` (its loss is its own). */
let trainers = 0;

export class ModelTrainer {
  readonly model: CausalLM;
  readonly options: TrainerOptions;
  /** Optimizer steps taken. */
  stepCount = 0;
  private readonly names: string[];
  /** The trained variables: every weight, or with LoRA the adapter alone (the base frozen). */
  private readonly vars: Map<string, tf.Variable>;
  private readonly m = new Map<string, tf.Variable>();
  private readonly v = new Map<string, tf.Variable>();
  private acc = new Map<string, tf.Tensor>();
  private accCount = 0;
  private readonly kernelSite = `training pass ${++trainers}`;
  /** The sharded optimizer with `options.zero`, else the moments are `m` and `v`. */
  private readonly zero: ShardedAdamW | undefined;
  /** The whole sharded moments, gathered by {@link readToHost} for a checkpoint. */
  private gathered: NamedTensors | undefined;

  constructor(model: CausalLM, options: TrainerOptions) {
    this.model = model;
    this.options = options;
    this.vars = model.trainableParams();
    this.names = [...this.vars.keys()].filter((n) => options.trainable?.(n) ?? true);
    const trained = this.names.reduce((a, n) => a + this.vars.get(n)!.size, 0);
    // Two moments now and the gradients at the first step (activations: `tokenStats`).
    const z = options.zero;
    const zero = z && { stage: z.stage, worldSize: z.group.worldSize };
    const mem = trainingMemory(model.config, { tokens: 0, trainableParameters: trained, zero });
    assertBackendRoom(
      mem.gradientBytes + mem.optimizerBytes,
      `training ${(trained / 1e6).toFixed(trained < 1e6 ? 2 : 0)}M parameters with AdamW` +
        (z ? ` (ZeRO-${z.stage} over ${z.group.worldSize} ranks)` : ''),
      {
        hostRemedy: `train a LoRA adapter (--lora-rank)${z ? '' : ', shard the optimizer (--zero_stage 1 or 2 with replicas)'} or use a machine with more memory`,
      },
    );
    if (z) {
      this.zero = new ShardedAdamW(new Map(this.names.map((n) => [n, this.vars.get(n)!])), z);
      return;
    }
    for (const n of this.names) {
      const p = this.vars.get(n)!;
      // In a tidy: the zeros tensor would otherwise keep its buffer after the first step.
      this.m.set(
        n,
        tf.tidy(() => tf.variable(tf.zerosLike(p), false, `adam.m.${p.name}`)),
      );
      this.v.set(
        n,
        tf.tidy(() => tf.variable(tf.zerosLike(p), false, `adam.v.${p.name}`)),
      );
    }
  }

  /**
   * Computes the gradients of `lossFn` (a scalar built from the model's forward pass) and adds
   * them to the accumulator; returns the loss value. Reads synchronously: on a backend that keeps
   * tensors on a device (webgpu) use {@link accumulateAsync}.
   *
   * With `read`, `lossFn` also returns `extras`, a tensor of statistics from the same forward
   * (e.g. `ppoActorLossWithStats`'s sums): loss and extras are read back in one sync, and `read`
   * turns the extras into its result before the gradients join the accumulator, so a `read` that
   * throws (non-finite inputs) leaves the accumulator as it was.
   */
  accumulate(lossFn: () => tf.Scalar): number;
  accumulate<T>(
    lossFn: () => { loss: tf.Scalar; extras: tf.Tensor },
    read: (extras: Float32Array) => T,
  ): { loss: number; extras: T };
  accumulate<T>(
    lossFn: (() => tf.Scalar) | (() => { loss: tf.Scalar; extras: tf.Tensor }),
    read?: (extras: Float32Array) => T,
  ): number | { loss: number; extras: T } {
    const pass = this.backward(lossFn);
    return this.settle(pass, () => pass.values.dataSync() as Float32Array, read);
  }

  /**
   * {@link accumulate} that reads loss and extras back asynchronously, in one round trip: the
   * only way on a backend that cannot read a GPU tensor synchronously (webgpu in Node), and as
   * good as a sync read elsewhere.
   */
  accumulateAsync(lossFn: () => tf.Scalar): Promise<number>;
  accumulateAsync<T>(
    lossFn: () => { loss: tf.Scalar; extras: tf.Tensor },
    read: (extras: Float32Array) => T,
  ): Promise<{ loss: number; extras: T }>;
  async accumulateAsync<T>(
    lossFn: (() => tf.Scalar) | (() => { loss: tf.Scalar; extras: tf.Tensor }),
    read?: (extras: Float32Array) => T,
  ): Promise<number | { loss: number; extras: T }> {
    // On webgpu, a pass's first run would compile its kernels inside this synchronous call.
    const ahead = compileKernelsAhead(this.kernelSite, () => void this.backward(lossFn));
    if (ahead) await ahead;
    const pass = this.backward(lossFn);
    let values: Float32Array;
    try {
      values = (await pass.values.data()) as Float32Array;
    } catch (e) {
      pass.values.dispose();
      pass.grads.forEach((g) => g.dispose());
      throw e;
    }
    return this.settle(pass, () => values, read);
  }

  /**
   * Turns a pass's read-back `[loss, ...extras]` into the caller's result and, unless that throws,
   * adds its gradients to the accumulator; frees the pass's tensors either way.
   */
  private settle<T>(
    pass: { values: tf.Tensor1D; grads: Map<string, tf.Tensor> },
    values: () => Float32Array,
    read: ((extras: Float32Array) => T) | undefined,
  ): number | { loss: number; extras: T } {
    let out: number | { loss: number; extras: T };
    try {
      const v = values();
      out = read ? { loss: v[0]!, extras: read(v.subarray(1)) } : v[0]!;
    } catch (e) {
      pass.grads.forEach((g) => g.dispose());
      throw e;
    } finally {
      pass.values.dispose();
    }
    this.addGrads(pass.grads);
    return out;
  }

  /**
   * The gradients of `lossFn` and, in one tensor to read back at once, its loss followed by its
   * extras (if any); nothing read back yet.
   */
  private backward(lossFn: (() => tf.Scalar) | (() => { loss: tf.Scalar; extras: tf.Tensor })): {
    values: tf.Tensor1D;
    grads: Map<string, tf.Tensor>;
  } {
    const vars = this.names.map((n) => this.vars.get(n)!);
    let extras: tf.Tensor | undefined;
    const { value, grads } = freeingGrads(() => {
      const r = lossFn();
      if (r instanceof tf.Tensor) return r;
      extras = tf.keep(r.extras);
      return r.loss;
    }, vars);
    const values = tf.tidy(() =>
      tf.concat([tf.reshape(value, [1]), ...(extras ? [tf.reshape(extras, [-1])] : [])]),
    ) as tf.Tensor1D;
    value.dispose();
    extras?.dispose();
    // The walk frees each activation once used (recompute.ts). Gradients are keyed by variable
    // name, with a per-model suffix (llama.ts); one the loss does not reach has none.
    const byName = new Map<string, tf.Tensor>();
    grads.forEach((g, i) => g && byName.set(vars[i]!.name, g));
    return { values, grads: byName };
  }

  /** Adds one pass's gradients (keyed by variable name) to the accumulator. */
  private addGrads(byVar: Map<string, tf.Tensor>): void {
    for (const n of this.names) {
      const key = this.vars.get(n)!.name;
      const g = byVar.get(key);
      byVar.delete(key);
      if (!g) continue;
      const prev = this.acc.get(n);
      if (prev) {
        this.acc.set(n, tf.add(prev, g));
        prev.dispose();
        g.dispose();
      } else this.acc.set(n, g);
    }
    byVar.forEach((g) => g.dispose());
    this.accCount++;
  }

  /**
   * Hands the accumulated gradients of every trainable parameter (zeros where a micro-batch left
   * one untouched, so every data-parallel rank hands over the same set) to `reduce`, which may
   * change them in place (an all-reduce), and accumulates the result instead.
   */
  async reduceGradients(
    reduce: (grads: Record<string, Float32Array>) => Promise<void>,
  ): Promise<void> {
    const grads: Record<string, Float32Array> = {};
    for (const n of this.names) {
      const g = this.acc.get(n);
      grads[n] = g
        ? ((await g.data()) as Float32Array).slice()
        : new Float32Array(this.vars.get(n)!.size);
    }
    await reduce(grads);
    for (const n of this.names) {
      this.acc.get(n)?.dispose();
      this.acc.set(n, tf.tensor(grads[n]!, this.vars.get(n)!.shape, 'float32'));
    }
  }

  /**
   * {@link reduceGradients} with the gradients left where the backend holds them: every
   * trainable parameter's accumulated gradient (zeros where none), end to end in name order in
   * one new flat tensor that `reduce` may change in place (a c10d all-reduce), then accumulated
   * from it. Nothing is read to JavaScript.
   */
  async reduceGradientTensors(reduce: (flat: tf.Tensor1D) => Promise<void>): Promise<void> {
    const flat = tf.tidy(() =>
      tf.concat(
        this.names.map((n) => {
          const g = this.acc.get(n);
          return g ? g.reshape([-1]) : tf.zeros([this.vars.get(n)!.size]);
        }),
      ),
    ) as tf.Tensor1D;
    try {
      await reduce(flat);
      let o = 0;
      for (const n of this.names) {
        const v = this.vars.get(n)!;
        this.acc.get(n)?.dispose();
        this.acc.set(
          n,
          tf.tidy(() => flat.slice(o, v.size).reshape(v.shape)),
        );
        o += v.size;
      }
    } finally {
      flat.dispose();
    }
  }

  /** Whether AdamW's state is sharded over data-parallel ranks (`options.zero`). */
  get sharded(): boolean {
    return this.zero !== undefined;
  }

  /** Bytes of AdamW state this rank holds: both moments, or its shards of them. */
  optimizerStateBytes(): number {
    if (this.zero) return this.zero.stateBytes();
    let n = 0;
    for (const map of [this.m, this.v]) map.forEach((t) => (n += 4 * t.size));
    return n;
  }

  /**
   * With `options.zero`, every rank calls it where it would all-reduce: the accumulated
   * gradients are summed over the ranks and each keeps its shard (see `zero-optimizer.ts`).
   */
  async reduceGradientShards(): Promise<void> {
    if (!this.zero) throw new ModelError('MODEL_INPUT', 'reduceGradientShards needs options.zero');
    await this.zero.reduceGradients(this.acc);
  }

  /** Drops accumulated gradients without stepping. */
  zeroGrad(): void {
    this.acc.forEach((g) => g.dispose());
    this.acc.clear();
    this.zero?.dropGradients();
    this.accCount = 0;
  }

  /**
   * Applies one AdamW step with the accumulated gradients, scaled by `scale` (default: the mean
   * over accumulated micro-batches), clipped by global norm.
   */
  step(opts: { scale?: number } = {}): StepStats {
    if (this.zero) throw new ModelError('MODEL_INPUT', 'a sharded optimizer steps with stepAsync');
    const sq = this.squaredGradNorm();
    const sum = sq ? sq.dataSync()[0]! : 0;
    sq?.dispose();
    return this.update(Math.sqrt(sum), opts.scale);
  }

  /** {@link step} that reads the gradient norm asynchronously (see {@link accumulateAsync}). */
  async stepAsync(opts: { scale?: number } = {}): Promise<StepStats> {
    if (this.zero) return this.stepShards(opts.scale);
    const sq = this.squaredGradNorm();
    const sum = sq ? ((await sq.data()) as Float32Array)[0]! : 0;
    sq?.dispose();
    return this.update(Math.sqrt(sum), opts.scale);
  }

  /** The sum of squares of the accumulated gradients (unscaled), or undefined when none. */
  private squaredGradNorm(): tf.Scalar | undefined {
    if (!this.acc.size) return undefined;
    const fused = sumOfSquaresImpls.get(tf.getBackend());
    if (fused) return fused([...this.acc.values()]);
    return tf.tidy(() =>
      tf.addN([...this.acc.values()].map((g) => tf.sum(tf.square(g)))),
    ) as tf.Scalar;
  }

  /** The step's AdamW scalars (weight decay as configured) and its gradient norm. */
  private scalars(rawNorm: number, scaleOpt: number | undefined) {
    const o = this.options;
    const lr = learningRate(o, this.stepCount);
    const [beta1, beta2] = [o.beta1 ?? 0.9, o.beta2 ?? 0.95];
    const maxNorm = o.maxGradNorm ?? 1.0;
    const scale = scaleOpt ?? (this.accCount ? 1 / this.accCount : 1);
    const t = this.stepCount + 1;
    const gradNorm = rawNorm * scale;
    const clip = maxNorm > 0 && gradNorm > maxNorm ? maxNorm / (gradNorm + 1e-6) : 1;
    const [bc1, bc2, eps, weightDecay] = [
      1 - beta1 ** t,
      1 - beta2 ** t,
      o.eps ?? 1e-8,
      o.weightDecay,
    ];
    return {
      s: { lr, beta1, beta2, eps, weightDecay: weightDecay ?? 0, bc1, bc2, gs: scale * clip },
      gradNorm,
    };
  }

  /** The sharded step: global norm from every rank's shards, AdamW on them, weights gathered. */
  private async stepShards(scale: number | undefined): Promise<StepStats> {
    const { s, gradNorm } = this.scalars(Math.sqrt(await this.zero!.squaredNorm()), scale);
    await this.zero!.apply(s);
    const micro = this.accCount;
    this.zeroGrad();
    this.stepCount++;
    return { step: this.stepCount, lr: s.lr, gradNorm, microBatches: micro };
  }

  /** The AdamW update, given the norm of the accumulated (unscaled) gradients. */
  private update(rawNorm: number, scaleOpt: number | undefined): StepStats {
    const { s: scalars, gradNorm } = this.scalars(rawNorm, scaleOpt);
    const { lr, beta1: b1, beta2: b2, eps, weightDecay: wd, bc1, bc2, gs } = scalars;
    const micro = this.accCount;
    for (const n of this.names) {
      const gRaw = this.acc.get(n);
      if (!gRaw) continue;
      const p = this.vars.get(n)!;
      const m = this.m.get(n)!;
      const v = this.v.get(n)!;
      const fused = adamwImpls.get(tf.getBackend());
      if (fused) {
        // One kernel for the whole update where the backend has it (e.g. torch).
        const decay = wd > 0 && p.rank >= 2 ? wd : 0;
        const s = { lr, beta1: b1, beta2: b2, eps, weightDecay: decay, bc1, bc2, gs };
        const [np, nm, nv] = fused(p, m, v, gRaw, s);
        assignFree(m, nm);
        assignFree(v, nv);
        assignFree(p, np);
        gRaw.dispose();
        this.acc.delete(n);
        continue;
      }
      // AdamW as chains that free each intermediate as soon as the next exists: a tidy keeps a
      // dozen parameter-sized temporaries alive at once, which for a 0.6B model's embedding
      // (622 MB) alone is more than the weights, gradients and moments of the whole model.
      const g = tf.mul(gRaw, gs);
      const gm = tf.mul(g, 1 - b1);
      assignFree(
        m,
        chain(
          m,
          (x) => tf.mul(x, b1),
          (x) => tf.add(x, gm),
        ),
      );
      gm.dispose();
      const gv = chain(g, tf.square, (x) => tf.mul(x, 1 - b2));
      g.dispose();
      assignFree(
        v,
        chain(
          v,
          (x) => tf.mul(x, b2),
          (x) => tf.add(x, gv),
        ),
      );
      gv.dispose();
      const denom = chain(
        v,
        (x) => tf.div(x, bc2),
        tf.sqrt,
        (x) => tf.add(x, eps),
      );
      const update = chain(
        m,
        (x) => tf.div(x, bc1),
        (x) => tf.div(x, denom),
        (x) => tf.mul(x, lr),
      );
      denom.dispose();
      const decayed = wd > 0 && p.rank >= 2 ? tf.mul(p, 1 - lr * wd) : p;
      assignFree(p, tf.sub(decayed, update));
      update.dispose();
      if (decayed !== p) decayed.dispose();
      // The gradient is spent: free it now rather than with the rest in zeroGrad.
      gRaw.dispose();
      this.acc.delete(n);
    }
    this.zeroGrad();
    this.stepCount++;
    return { step: this.stepCount, lr, gradNorm, microBatches: micro };
  }

  /**
   * Reads what {@link saveCheckpoint} writes (the trained weights and the optimizer's moments)
   * into host memory asynchronously (`readToHost`): call it first on a backend that cannot read
   * synchronously (webgpu).
   */
  async readToHost(): Promise<void> {
    // Sharded: a collective, so every rank calls it; rank 0 gets the whole moments.
    if (this.zero) this.gathered = await this.zero.gatherState();
    await Promise.all([
      this.model.readToHost(),
      readToHost([...this.m.values(), ...this.v.values()]),
    ]);
  }

  /** Optimizer moments as named tensors (`adam.m.<name>`, `adam.v.<name>`). */
  exportOptimizerState(): NamedTensors {
    if (this.zero) {
      if (!this.gathered || this.zero.rank > 0)
        throw new ModelError(
          'MODEL_CHECKPOINT',
          'a sharded optimizer exports on rank 0, after readToHost() on every rank',
        );
      const out = this.gathered;
      this.gathered = undefined;
      return out;
    }
    const out: NamedTensors = {};
    for (const [map, prefix] of [
      [this.m, 'adam.m.'],
      [this.v, 'adam.v.'],
    ] as const) {
      map.forEach(
        (t, n) => (out[prefix + n] = { shape: [...t.shape], data: t.dataSync() as Float32Array }),
      );
    }
    return out;
  }

  importOptimizerState(state: NamedTensors): void {
    if (this.zero) return this.zero.importState(state);
    tf.tidy(() => {
      for (const [map, prefix] of [
        [this.m, 'adam.m.'],
        [this.v, 'adam.v.'],
      ] as const) {
        map.forEach((t, n) => {
          const s = state[prefix + n];
          if (!s)
            throw new ModelError('MODEL_CHECKPOINT', `optimizer state has no '${prefix + n}'`);
          t.assign(tf.tensor(s.data, s.shape, 'float32'));
        });
      }
    });
  }

  /**
   * Saves an HF model directory plus `optimizer.safetensors` and `trainer_state.json`
   * (`{ step, ...extra }`), replacing `dir` atomically. A model with a LoRA adapter saves the
   * adapter alone (a PEFT adapter directory, plus `value_head.safetensors` for a critic) and the
   * adapter's optimizer state: the base is the checkpoint named in `adapter_config.json`.
   */
  saveCheckpoint(
    dir: string,
    extra: Record<string, unknown> = {},
    modelOpts: SaveModelOptions = {},
  ): void {
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    if (this.model.lora) saveLoraCheckpoint(tmp, this.model);
    else saveModel(tmp, this.model, modelOpts);
    writeFileSync(
      join(tmp, 'optimizer.safetensors'),
      serializeSafetensors(this.exportOptimizerState()),
    );
    writeFileSync(
      join(tmp, 'trainer_state.json'),
      JSON.stringify({ ...extra, step: this.stepCount }, null, 2) + '\n',
    );
    const old = `${dir}.old-${process.pid}`;
    if (existsSync(dir)) renameSync(dir, old);
    renameSync(tmp, dir);
    rmSync(old, { recursive: true, force: true });
  }

  /** Restores weights, optimizer state and step from {@link saveCheckpoint}; returns the state JSON. */
  loadCheckpoint(dir: string): Record<string, unknown> {
    if (isLoraAdapterDir(dir)) loadLoraCheckpoint(dir, this.model);
    else {
      const { tensors, sourceOf } = readCheckpointWeights(dir);
      this.model.importWeights(tensors, { strict: false, source: sourceOf });
    }
    const optPath = join(dir, 'optimizer.safetensors');
    if (existsSync(optPath))
      this.importOptimizerState(parseSafetensors(readFileSync(optPath), optPath).tensors);
    const state = JSON.parse(readFileSync(join(dir, 'trainer_state.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    this.stepCount = Number(state.step ?? 0);
    return state;
  }

  dispose(): void {
    this.zeroGrad();
    this.zero?.dispose();
    this.m.forEach((t) => t.dispose());
    this.v.forEach((t) => t.dispose());
  }
}
