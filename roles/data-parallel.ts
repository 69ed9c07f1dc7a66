/**
 * Data parallelism for the trainer and the critic (`--actor-num-replicas`, `--critic-num-replicas`):
 * N ranks each get the whole optimizer step, compute the loss weights over all of it, run only
 * their share of its samples (shares of about equal cost, by a cost model the ranks learn from their own
 * timings: `ShareCost`), then sum gradients and loss statistics with one
 * all-reduce over the runtime's collective group and step identically. The reduction is
 * deterministic and the same on every rank, so the weights stay bit-identical across ranks. Work
 * every rank needs the result of (the trainer's recomputed old logprobs) is split the same way
 * and joined by one all-reduce (`shareRows`).
 *
 * @module
 */
import type { Collective, CollectiveBackend, DeviceTensor } from '../runtime/collective/backend.ts';
import { initCollectiveGroup } from '../runtime/collective/group.ts';
import { defaultCollectiveBackend } from '../model/backends/torch/collective.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';
import type { ModelTrainer, TrainerOptions } from '../model/training.ts';
import type { ZeroStage } from '../model/zero-optimizer.ts';
import {
  rankMicroBatches,
  type MicroBatch,
  type MicroBatchOptions,
} from '../algorithms/packing.ts';

/** Where a rank sits; absent (or worldSize 1) trains alone. */
export interface DataParallelInit {
  /** Collective group name, unique per run and role. */
  group: string;
  rank: number;
  worldSize: number;
  /** How long one all-reduce may take before the step fails. @default 600000 */
  timeoutMs?: number;
  /**
   * What carries the all-reduce. @default `nccl` on the torch backend on CUDA, `gloo` on it on
   * CPU, `ring` on every other backend
   */
  backend?: CollectiveBackend;
}

/** What {@link DataParallelRank.reduce} returns: the summed statistics and every rank's compute time. */
export interface ReducedStep {
  /** The `stats` given to `reduce`, summed over the ranks. */
  stats: number[];
  /** Milliseconds each rank spent between `microBatches` and `reduce` (its share's compute). */
  computeMs: number[];
}

/** One rank's view of its data-parallel group. */
export class DataParallelRank {
  /** This rank's share of the step in progress: its features and when its compute began. */
  private share = { linear: 0, quadratic: 0, startedAt: 0 };
  private readonly cost = new ShareCost();

  private constructor(
    readonly rank: number,
    readonly worldSize: number,
    private readonly group: Collective<Float32Array | DeviceTensor> | undefined,
  ) {}

  /**
   * `backend` as the run's roles line shows it: with the collective that carries the ranks'
   * all-reduce when there are several (`torch (cpu, fp32), collective gloo`).
   */
  describe(backend: string): string {
    return this.group ? `${backend}, collective ${this.group.backend}` : backend;
  }

  /** What carries this rank's collectives (`ring` alone too). */
  get collective(): CollectiveBackend {
    return this.group?.backend ?? 'ring';
  }

  /** Joins the group (waits for every rank); a single rank needs no group. */
  static async join(init: DataParallelInit | undefined): Promise<DataParallelRank> {
    if (!init || init.worldSize <= 1) return new DataParallelRank(0, 1, undefined);
    const group = await initCollectiveGroup({
      name: init.group,
      rank: init.rank,
      worldSize: init.worldSize,
      timeoutMs: init.timeoutMs ?? 600_000,
      backend: init.backend ?? defaultCollectiveBackend(),
    });
    return new DataParallelRank(init.rank, init.worldSize, group);
  }

  /**
   * The `ModelTrainer` options that shard its optimizer over this rank's group at ZeRO `stage`
   * (`--zero_stage`): none at stage 0 or alone (one rank holds everything, and a sharded
   * checkpoint resumes there).
   */
  zeroOptions(stage: ZeroStage = 0): Pick<TrainerOptions, 'zero'> {
    if (stage === 3)
      throw new InvalidArgumentError(
        '--zero_stage 3 (parameters sharded) is not implemented: use 1 or 2',
      );
    if (stage === 0 || !this.group) return {};
    if (this.group.backend === 'ring')
      throw new InvalidArgumentError(
        `--zero_stage ${stage} needs c10d collectives (RTJOB_TF_BACKEND=torch: gloo or nccl), not the ring`,
      );
    return { zero: { stage, group: this.group } };
  }

  /**
   * This rank's micro-batches of an optimizer step whose samples have `lengths`: a share of about
   * equal cost to every other rank's (`rankMicroBatches`, with the cost of a row's length learnt
   * from the ranks' timings of earlier steps), so the ranks reach the all-reduce at about the same
   * time. The rank's compute is timed from here to {@link reduce}.
   */
  microBatches(lengths: readonly number[], opts: MicroBatchOptions): MicroBatch[] {
    const attentionLength = this.cost.attentionLength();
    const cuts = rankMicroBatches(lengths, {
      ...opts,
      rank: this.rank,
      worldSize: this.worldSize,
      ...(attentionLength !== undefined ? { attentionLength } : {}),
    });
    let linear = 0;
    let quadratic = 0;
    for (const b of cuts) {
      const t = Math.max(0, ...b.indices.map((i) => lengths[i] as number));
      linear += b.indices.length * t;
      quadratic += b.indices.length * t * t;
    }
    this.share = { linear, quadratic, startedAt: performance.now() };
    return cuts;
  }

  /**
   * Sums the accumulated gradients of `opt` and the step's `stats` over every rank (in place for
   * the gradients), with each rank's compute time since {@link microBatches}: every rank gets the
   * same numbers, so every rank learns the same cost model and cuts the next step alike.
   */
  async reduce(opt: ModelTrainer, stats: readonly number[]): Promise<ReducedStep> {
    const ms = performance.now() - this.share.startedAt;
    if (!this.group) return { stats: [...stats], computeMs: [ms] };
    const n = stats.length;
    // Per rank: compute ms, Σ rows × longest, Σ rows × longest², each in the rank's own slots.
    const sums = new Float32Array(n + 3 * this.worldSize);
    sums.set(stats);
    sums.set([ms, this.share.linear, this.share.quadratic], n + 3 * this.rank);
    const group = this.group;
    if (group.backend === 'ring') {
      await opt.reduceGradients(async (grads) => {
        // '~' sorts after every parameter name, and no parameter is called that.
        await group.allreduce({ ...grads, '~stats': sums }, { op: 'sum' });
      });
    } else if (opt.sharded) {
      // ZeRO: each rank keeps its shard of the summed gradients (model/zero-optimizer.ts).
      await opt.reduceGradientShards();
      await group.allreduce(sums, { op: 'sum' });
    } else {
      // c10d: the gradients stay in libtorch; the statistics go in place from this array.
      await opt.reduceGradientTensors(async (flat) => {
        await group.allreduce(flat, { op: 'sum' });
      });
      await group.allreduce(sums, { op: 'sum' });
    }
    const computeMs: number[] = [];
    for (let r = 0; r < this.worldSize; r++) {
      const [rankMs, linear, quadratic] = sums.subarray(n + 3 * r, n + 3 * r + 3);
      computeMs.push(rankMs!);
      this.cost.observe(linear!, quadratic!, rankMs!);
    }
    return { stats: Array.from(sums.subarray(0, n)), computeMs };
  }

  /**
   * Rows computed for every item, each by one rank: `f` runs on this rank's share (the items
   * dealt round-robin, longest row first, so the shares cost about alike) and one all-reduce
   * joins the shares, so every rank ends with every row. A row is summed with zeros from the
   * ranks that did not compute it, so its values are its rank's, exactly. Every rank must call
   * it with the same items, as with {@link reduce}.
   *
   * @param width the length of each item's row
   */
  async shareRows<T>(
    items: readonly T[],
    width: (item: T) => number,
    f: (mine: T[]) => Promise<number[][]>,
  ): Promise<number[][]> {
    if (!this.group) return f([...items]);
    const widths = items.map(width);
    const order = items.map((_, i) => i).sort((a, b) => widths[b]! - widths[a]! || a - b);
    const mine = order.filter((_, k) => k % this.worldSize === this.rank);
    const rows = await f(mine.map((i) => items[i]!));
    const offsets: number[] = [];
    let total = 0;
    for (const w of widths) {
      offsets.push(total);
      total += w;
    }
    const flat = new Float32Array(total);
    mine.forEach((i, k) => {
      const row = rows[k]!;
      if (row.length !== widths[i])
        throw new InvalidArgumentError(
          `shareRows: row ${i} has ${row.length} values, expected ${widths[i]}`,
        );
      flat.set(row, offsets[i]);
    });
    await this.group.allreduce({ rows: flat }, { op: 'sum' });
    return widths.map((w, i) => Array.from(flat.subarray(offsets[i]!, offsets[i]! + w)));
  }

  /** Leaves the group. */
  leave(): void {
    this.group?.destroy();
  }
}

/**
 * How a share's compute time grows with its rows' lengths, learnt from the ranks' own timings:
 * time ≈ a × Σ rows·T + b × Σ rows·T² over its micro-batches (T the longest row of each), by
 * least squares over recent steps (older ones weigh less, so a change of load is followed). Attention
 * makes the quadratic term; how much it weighs depends on the model and the backend (on the wasm
 * backend the built-in model's attention runs in JS loops, and `a / b` is ~120 tokens), so it is
 * measured rather than assumed. Until enough steps are seen, or when the fit is not sane, the
 * cost is linear in padded tokens.
 */
export class ShareCost {
  private ll = 0;
  private lq = 0;
  private qq = 0;
  private ly = 0;
  private qy = 0;
  private seen = 0;

  constructor(
    /** Weight kept by older observations at each new one. */
    private readonly decay = 0.9,
    /** Observations before the fit is used. */
    private readonly minSeen = 4,
  ) {}

  /** One rank's share of one step: its Σ rows·T, Σ rows·T² and compute milliseconds. */
  observe(linear: number, quadratic: number, ms: number): void {
    if (!(linear > 0 && ms > 0 && Number.isFinite(quadratic))) return;
    // Scaled so the sums stay well inside float64 for long sequences.
    const l = linear / 1e3;
    const q = quadratic / 1e6;
    const d = this.decay;
    this.ll = this.ll * d + l * l;
    this.lq = this.lq * d + l * q;
    this.qq = this.qq * d + q * q;
    this.ly = this.ly * d + l * ms;
    this.qy = this.qy * d + q * ms;
    this.seen++;
  }

  /** The length at which a row's attention costs as much as the rest of it; undefined: linear. */
  attentionLength(): number | undefined {
    if (this.seen < this.minSeen) return undefined;
    const det = this.ll * this.qq - this.lq * this.lq;
    if (!(det > 1e-12 * this.ll * this.qq)) return undefined;
    const a = (this.ly * this.qq - this.qy * this.lq) / det / 1e3;
    const b = (this.qy * this.ll - this.ly * this.lq) / det / 1e6;
    if (!(a > 0 && b > 0)) return undefined;
    return Math.min(1e6, Math.max(8, a / b));
  }
}
