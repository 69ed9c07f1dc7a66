/**
 * AdamW with its state sharded over data-parallel ranks, ZeRO's stages 1 and 2 (DeepSpeed's and
 * OpenRLHF's `--zero_stage`) on the torch backend's c10d collectives. Every trained parameter is
 * flattened, padded with zeros to a multiple of the world size N and cut into N equal chunks;
 * rank r owns chunk r of every parameter, and keeps AdamW's two moments for its chunks alone
 * (1/N of them per rank). A step reduces the gradients (stage 1: the all-reduce of stage 0, then
 * each rank keeps its chunks; stage 2: a reduce-scatter, so each rank only ever receives its
 * chunks of the sum), clips by the global norm (the ranks' squared chunk norms all-reduced),
 * applies the backend's fused AdamW to its chunks and all-gathers every parameter's updated
 * chunks, so every rank ends with the same whole weights.
 *
 * Sharding by parameter (rather than one flat vector) keeps each parameter's weight decay (none
 * on norms and biases) and each collective's transient copy the size of one parameter. The
 * update is the unsharded one element by element: the same kernel on the same values.
 *
 * Checkpoints are written whole (`adam.m.<name>`, `adam.v.<name>`, as the unsharded trainer
 * writes them): {@link ShardedAdamW.gatherState} all-gathers the moments into host memory, one
 * parameter at a time, and {@link ShardedAdamW.importState} takes this rank's chunks of a whole
 * state. The layout names no rank count, so a checkpoint resumes at any number of ranks and any
 * stage, exactly.
 *
 * Not done here: stage 3 (parameters sharded, gathered per layer for the forward and backward
 * passes); stage 2 reduce-scattering each micro-batch's gradients as it ends (here the
 * micro-batches' gradients accumulate whole on every rank, as at stage 1, and are
 * reduce-scattered once per optimizer step: the ranks' shares may hold different numbers of
 * micro-batches, so they cannot meet after each).
 *
 * @module
 */
import type { Collective, DeviceTensor } from '../runtime/collective/backend.ts';
import { tf } from './backend.ts';
import { adamwImpls, type AdamWScalars } from './backend-ops.ts';
import { ModelError } from './errors.ts';
import type { NamedTensors } from './tensors.ts';

/** OpenRLHF's `--zero_stage`: 0 none, 1 optimizer state, 2 also gradients, 3 also parameters. */
export type ZeroStage = 0 | 1 | 2 | 3;

/** Every stage, for checks at the edges. */
export const zeroStages: readonly ZeroStage[] = [0, 1, 2, 3];

/** How a trainer's state is sharded: the stage and the data-parallel group it is sharded over. */
export interface ZeroSharding {
  stage: 1 | 2;
  group: Collective<Float32Array | DeviceTensor>;
}

/** One parameter's chunks: the whole size, the padded chunk length, this rank's moments. */
interface Shard {
  variable: tf.Variable;
  size: number;
  chunk: number;
  m: tf.Variable;
  v: tf.Variable;
  /** This rank's chunk of the reduced gradient, once reduced. */
  grad?: tf.Tensor1D;
}

/** The step's scalars that {@link ShardedAdamW.apply} takes (weight decay as configured). */
export type ShardedStepScalars = AdamWScalars;

/** AdamW's moments sharded over a c10d group (see the module note). */
export class ShardedAdamW {
  readonly stage: 1 | 2;
  readonly rank: number;
  readonly worldSize: number;
  private readonly group: Collective<Float32Array | DeviceTensor>;
  private readonly shards = new Map<string, Shard>();

  /** @param params the trained parameters by name, in the order every rank visits them */
  constructor(params: ReadonlyMap<string, tf.Variable>, sharding: ZeroSharding) {
    const { group, stage } = sharding;
    if (group.backend === 'ring')
      throw new ModelError(
        'MODEL_INPUT',
        `--zero_stage ${stage} needs the torch backend's c10d collectives (gloo or nccl), not the ring`,
      );
    if (!adamwImpls.has(tf.getBackend()))
      throw new ModelError(
        'MODEL_BACKEND',
        `--zero_stage ${stage} needs a backend with a fused AdamW (torch), not '${tf.getBackend()}'`,
      );
    this.stage = stage;
    this.group = group;
    this.rank = group.rank;
    this.worldSize = group.worldSize;
    for (const [name, variable] of params) {
      const chunk = Math.ceil(variable.size / this.worldSize);
      const zeros = (what: string) =>
        tf.tidy(() => tf.variable(tf.zeros([chunk]), false, `adam.${what}.shard.${variable.name}`));
      this.shards.set(name, { variable, size: variable.size, chunk, m: zeros('m'), v: zeros('v') });
    }
  }

  /** Bytes of AdamW state this rank holds (its chunks of both moments). */
  stateBytes(): number {
    let n = 0;
    this.shards.forEach((s) => (n += 4 * (s.m.size + s.v.size)));
    return n;
  }

  /**
   * Reduces the accumulated gradients `acc` (by parameter name; absent: zeros) over the group
   * and keeps this rank's chunk of each sum; frees and empties `acc`.
   */
  async reduceGradients(acc: Map<string, tf.Tensor>): Promise<void> {
    for (const [name, s] of this.shards) {
      const g = acc.get(name);
      acc.delete(name);
      const padded = tf.tidy(() => padFlat(g ?? tf.zeros([s.size]), s.chunk * this.worldSize));
      g?.dispose();
      s.grad?.dispose();
      try {
        if (this.stage === 1) {
          await this.group.allreduce(padded, { op: 'sum' });
          s.grad = tf.slice(padded, this.rank * s.chunk, s.chunk);
        } else {
          const out = tf.zeros([s.chunk]) as tf.Tensor1D;
          s.grad = await this.group.reduceScatter(out, padded).catch((e: unknown) => {
            out.dispose();
            throw e;
          });
        }
      } finally {
        padded.dispose();
      }
    }
    acc.forEach((g) => g.dispose());
    acc.clear();
  }

  /** The squared global norm of the reduced gradients: every rank's chunk norms, all-reduced. */
  async squaredNorm(): Promise<number> {
    const parts = [...this.shards.values()].flatMap((s) => (s.grad ? [s.grad] : []));
    const sum = new Float32Array(1);
    if (parts.length) {
      const sq = tf.tidy(() => tf.addN(parts.map((g) => tf.sum(tf.square(g)))));
      sum[0] = ((await sq.data()) as Float32Array)[0]!;
      sq.dispose();
    }
    await this.group.allreduce(sum, { op: 'sum' });
    return sum[0]!;
  }

  /**
   * One AdamW step of this rank's chunks with `s` (its `weightDecay` applied to matrices only,
   * as unsharded), then every parameter's chunks all-gathered into the whole weights.
   */
  async apply(s: ShardedStepScalars): Promise<void> {
    const fused = adamwImpls.get(tf.getBackend())!;
    for (const sh of this.shards.values()) {
      const g = sh.grad;
      if (!g) continue;
      sh.grad = undefined;
      const p = sh.variable;
      const whole = sh.chunk * this.worldSize;
      const mine = tf.tidy(() => tf.slice(padFlat(p, whole), this.rank * sh.chunk, sh.chunk));
      const decay = s.weightDecay > 0 && p.rank >= 2 ? s.weightDecay : 0;
      const [np, nm, nv] = fused(mine, sh.m, sh.v, g, { ...s, weightDecay: decay });
      mine.dispose();
      g.dispose();
      sh.m.assign(nm);
      sh.v.assign(nv);
      nm.dispose();
      nv.dispose();
      // Unpadded, the chunks are gathered into the parameter's own storage (a reshape shares it):
      // no whole-sized copy, which for an embedding is hundreds of MiB.
      const inPlace = whole === sh.size;
      const gathered = (inPlace ? p.reshape([-1]) : tf.zeros([whole])) as tf.Tensor1D;
      try {
        await this.group.allGather(gathered, np);
        if (!inPlace) p.assign(tf.tidy(() => tf.slice(gathered, 0, sh.size).reshape(p.shape)));
      } finally {
        np.dispose();
        gathered.dispose();
      }
    }
  }

  /** Drops the reduced gradients without stepping. */
  dropGradients(): void {
    this.shards.forEach((s) => {
      s.grad?.dispose();
      s.grad = undefined;
    });
  }

  /**
   * The whole moments (`adam.m.<name>`, `adam.v.<name>`, each the parameter's shape), gathered
   * from every rank into rank 0's host memory one parameter at a time (the others resolve with
   * none). Every rank must call it.
   */
  async gatherState(): Promise<NamedTensors> {
    const out: NamedTensors = {};
    // Every first moment, then every second one: the unsharded trainer's order, so the files match.
    for (const moment of ['m', 'v'] as const) {
      for (const [name, s] of this.shards) {
        const t = s[moment];
        const prefix = `adam.${moment}.`;
        const mine = ((await t.data()) as Float32Array).slice();
        const all = new Float32Array(s.chunk * this.worldSize);
        await this.group.allGather(all, mine);
        if (this.rank === 0)
          out[prefix + name] = { shape: [...s.variable.shape], data: all.slice(0, s.size) };
      }
    }
    return out;
  }

  /** Takes this rank's chunks of a whole state (as {@link gatherState} or the unsharded trainer write it). */
  importState(state: NamedTensors): void {
    for (const [name, s] of this.shards) {
      for (const [t, prefix] of [
        [s.m, 'adam.m.'],
        [s.v, 'adam.v.'],
      ] as const) {
        const whole = state[prefix + name];
        if (!whole)
          throw new ModelError('MODEL_CHECKPOINT', `optimizer state has no '${prefix + name}'`);
        if (whole.data.length !== s.size)
          throw new ModelError(
            'MODEL_CHECKPOINT',
            `optimizer state '${prefix + name}' has ${whole.data.length} values, the parameter ${s.size}`,
          );
        const chunk = new Float32Array(s.chunk);
        const from = this.rank * s.chunk;
        chunk.set(whole.data.subarray(from, Math.min(s.size, from + s.chunk)));
        tf.tidy(() => t.assign(tf.tensor1d(chunk)));
      }
    }
  }

  dispose(): void {
    this.dropGradients();
    this.shards.forEach((s) => {
      s.m.dispose();
      s.v.dispose();
    });
  }
}

/** `t` flattened and padded with zeros to `length`. */
function padFlat(t: tf.Tensor, length: number): tf.Tensor1D {
  const flat = t.reshape([-1]) as tf.Tensor1D;
  return length > t.size ? tf.pad(flat, [[0, length - t.size]]) : flat;
}
