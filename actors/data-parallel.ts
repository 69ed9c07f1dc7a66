/**
 * Data parallelism for the trainer and the critic (`--actor-num-replicas`, `--critic-num-replicas`):
 * N ranks each get the whole optimizer step, compute the loss weights over all of it, run only
 * their share of its samples (shares of about equal padded cost), then sum gradients and loss statistics with one
 * all-reduce over the runtime's collective group and step identically. The reduction is
 * deterministic and the same on every rank, so the weights stay bit-identical across ranks.
 *
 * @module
 */
import { initCollectiveGroup, type CollectiveGroup } from '../runtime/collective/group.ts';
import type { ModelTrainer } from './model/training.ts';
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
}

/** One rank's view of its data-parallel group. */
export class DataParallelRank {
  private constructor(
    readonly rank: number,
    readonly worldSize: number,
    private readonly group: CollectiveGroup | undefined,
  ) {}

  /** Joins the group (waits for every rank); a single rank needs no group. */
  static async join(init: DataParallelInit | undefined): Promise<DataParallelRank> {
    if (!init || init.worldSize <= 1) return new DataParallelRank(0, 1, undefined);
    const group = await initCollectiveGroup({
      name: init.group,
      rank: init.rank,
      worldSize: init.worldSize,
      timeoutMs: init.timeoutMs ?? 600_000,
    });
    return new DataParallelRank(init.rank, init.worldSize, group);
  }

  /**
   * This rank's micro-batches of an optimizer step whose samples have `lengths`: a share of about
   * equal padded cost to every other rank's (`rankMicroBatches`), so the ranks reach the
   * all-reduce at about the same time.
   */
  microBatches(lengths: readonly number[], opts: MicroBatchOptions): MicroBatch[] {
    return rankMicroBatches(lengths, { ...opts, rank: this.rank, worldSize: this.worldSize });
  }

  /**
   * Sums the accumulated gradients of `opt` and the step's `stats` over every rank (in place for
   * the gradients); returns the summed statistics.
   */
  async reduce(opt: ModelTrainer, stats: readonly number[]): Promise<number[]> {
    if (!this.group) return [...stats];
    const sums = Float32Array.from(stats);
    await opt.reduceGradients(async (grads) => {
      // '~' sorts after every parameter name, and no parameter is called that.
      await this.group!.allreduce({ ...grads, '~stats': sums }, { op: 'sum' });
    });
    return Array.from(sums);
  }

  /** Leaves the group. */
  leave(): void {
    this.group?.destroy();
  }
}
