/**
 * The bounded rollout → trainer buffer of async training. It holds at most `queueSize`
 * (ASYNC_QUEUE_SIZE) batches: a producer takes a slot before it generates, so it blocks rather
 * than drops when the trainer falls behind; the slot is returned when the trainer takes the
 * batch, so generation of the next batch overlaps training of this one.
 *
 * Nothing is lost or duplicated on failure: a batch enters the queue atomically on `commit`;
 * a producer that fails calls `abort` (or uses {@link TrajectoryBuffer.produce}), which returns
 * its slot and hands back the trajectories it had staged; a trainer that fails before `ack`
 * calls `nack` (or uses {@link TrajectoryBuffer.consume}) and the batch goes back to the head of
 * the queue for the next `take`, once. A redelivered batch does not take a slot again (its slot
 * went back when it was first taken), so the queue may exceed `queueSize` by the number of failed
 * consumers; producers are never blocked by a trainer's failure.
 *
 * @module
 */
import { AlgorithmError, invalidOption } from './errors.ts';
import { stalenessStats, type StalenessStats } from './staleness.ts';
import type { Trajectory } from './trajectory.ts';

/** Options of {@link TrajectoryBuffer}. */
export interface TrajectoryBufferOptions {
  /** Batches the buffer holds, counting those being generated (`ASYNC_QUEUE_SIZE`). @default 1 */
  queueSize?: number;
}

/** One committed batch; `M` is what the producer attaches besides the trajectories. */
export interface BufferBatch<M = Readonly<Record<string, unknown>>> {
  /** Increasing id, unique per buffer. */
  readonly id: number;
  readonly trajectories: readonly Trajectory[];
  /** What the producer attached (the groups it ran, dataloader position, timings). */
  readonly meta: M;
  /** How many times this batch was handed to a consumer before (0 on first delivery). */
  readonly redeliveries: number;
}

/** A batch handed to a consumer; exactly one of `ack` / `nack` must follow. */
export interface BatchLease<M = Readonly<Record<string, unknown>>> {
  readonly batch: BufferBatch<M>;
  /** Per-token staleness against the `currentVersion` given to `take`, if any. */
  readonly staleness?: StalenessStats;
  /** The batch was trained on; it is gone. */
  ack(): void;
  /** Training failed; the batch returns to the head of the queue. */
  nack(): void;
}

/** Counters for logs and the dashboard. */
export interface BufferStats {
  queueSize: number;
  /** Committed batches waiting for the trainer. */
  queued: number;
  /** Slots free for producers. */
  freeSlots: number;
  /** Slots held by producers that have not committed or aborted. */
  producing: number;
  /** Leases out with a consumer. */
  leased: number;
  committed: number;
  acked: number;
  aborted: number;
  redelivered: number;
  /** Staleness over every token taken with a `currentVersion`: count, mean and max. */
  staleTokens: number;
  staleMean: number;
  staleMax: number;
}

interface Waiter<T> {
  resolve: (v: T) => void;
  reject: (e: unknown) => void;
  cleanup: () => void;
}

/**
 * A producer's claim on one batch of the buffer. Stage trajectories with `add`, then `commit`
 * them as one batch, or `abort` to give the slot back.
 */
export class BufferSlot<M = Readonly<Record<string, unknown>>> {
  #staged: Trajectory[] = [];
  #state: 'open' | 'committed' | 'aborted' = 'open';
  constructor(
    private readonly onCommit: (items: Trajectory[], meta: M) => void,
    private readonly onAbort: () => void,
  ) {}
  /** Trajectories staged so far. */
  get staged(): readonly Trajectory[] {
    return this.#staged;
  }
  /** Whether commit or abort already happened. */
  get settled(): boolean {
    return this.#state !== 'open';
  }
  /** Stages trajectories for this slot's batch. */
  add(...items: Trajectory[]): void {
    this.#check('add');
    this.#staged.push(...items);
  }
  /**
   * Enqueues the staged trajectories as one batch. An empty batch is a batch too: the consumer
   * learns that the producer's step yielded nothing (every episode failed or was rejected); a
   * producer with nothing to report calls {@link abort} instead.
   */
  commit(meta: M): void {
    this.#check('commit');
    this.#state = 'committed';
    this.onCommit(this.#staged, meta);
  }
  /** Returns the slot and hands back the staged trajectories, which were not enqueued. */
  abort(): Trajectory[] {
    if (this.#state !== 'open') return [];
    this.#state = 'aborted';
    this.onAbort();
    const items = this.#staged;
    this.#staged = [];
    return items;
  }
  #check(op: string): void {
    if (this.#state !== 'open') {
      throw new AlgorithmError('SHAPE_MISMATCH', `slot.${op}() after the slot was ${this.#state}`, {
        field: 'slot',
      });
    }
  }
}

/**
 * The bounded trajectory buffer. One instance lives in the driver; rollout loops produce into
 * it and the trainer consumes from it.
 *
 * @example
 * const buf = new TrajectoryBuffer({ queueSize: 2 });
 * // rollout loop
 * await buf.produce(async (slot) => { slot.add(...await generateBatch()); }, { step });
 * // trainer loop
 * await buf.consume(async (batch) => train(batch.trajectories), { currentVersion });
 */
export class TrajectoryBuffer<M = Readonly<Record<string, unknown>>> {
  readonly queueSize: number;
  #free: number;
  #queue: BufferBatch<M>[] = [];
  #producers: Waiter<BufferSlot<M>>[] = [];
  #consumers: Waiter<BatchLease<M> | null>[] = [];
  #closed = false;
  #nextId = 1;
  #producing = 0;
  #leased = 0;
  /** Batches that hold a slot: fresh commits do, redeliveries do not (their slot went back on the first take). */
  #holdsSlot = new WeakSet<BufferBatch<M>>();
  #counts = {
    committed: 0,
    acked: 0,
    aborted: 0,
    redelivered: 0,
    staleTokens: 0,
    staleSum: 0,
    staleMax: 0,
  };

  constructor(opts: TrajectoryBufferOptions = {}) {
    const q = opts.queueSize ?? 1;
    if (!(Number.isInteger(q) && q >= 1))
      throw invalidOption('ASYNC_QUEUE_SIZE', `must be an integer >= 1 (got ${q})`);
    this.queueSize = q;
    this.#free = q;
  }

  /** Waits for a free slot (FIFO). Rejects with `BUFFER_CLOSED` once the buffer is closed. */
  acquire(signal?: AbortSignal): Promise<BufferSlot<M>> {
    if (this.#closed) return Promise.reject(closedError());
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#free > 0 && this.#producers.length === 0) return Promise.resolve(this.#grantSlot());
    return this.#wait(this.#producers, signal);
  }

  /**
   * Waits for a batch. The slot goes back to the producers at once. Resolves `null` when the
   * buffer is closed and drained. Pass `currentVersion` to get per-token staleness.
   */
  take(opts: { currentVersion?: number; signal?: AbortSignal } = {}): Promise<BatchLease<M> | null> {
    if (opts.signal?.aborted) return Promise.reject(opts.signal.reason);
    if (this.#queue.length > 0 && this.#consumers.length === 0)
      return Promise.resolve(this.#lease(opts.currentVersion));
    if (this.#drained()) return Promise.resolve(null);
    return this.#wait(this.#consumers, opts.signal).then((l) =>
      l ? this.#withStaleness(l, opts.currentVersion) : l,
    );
  }

  /** Acquire a slot, run `fn` to fill it, commit; on a throw, abort (the staged items are dropped with the error). */
  async produce(fn: (slot: BufferSlot<M>) => Promise<void>, meta: M, signal?: AbortSignal): Promise<void> {
    const slot = await this.acquire(signal);
    try {
      await fn(slot);
    } catch (e) {
      slot.abort();
      throw e;
    }
    if (!slot.settled) slot.commit(meta);
  }

  /** Take a batch, run `fn`, ack; on a throw, nack and rethrow. Returns false when closed and drained. */
  async consume(
    fn: (batch: BufferBatch<M>, lease: BatchLease<M>) => Promise<void>,
    opts: { currentVersion?: number; signal?: AbortSignal } = {},
  ): Promise<boolean> {
    const lease = await this.take(opts);
    if (!lease) return false;
    try {
      await fn(lease.batch, lease);
    } catch (e) {
      lease.nack();
      throw e;
    }
    lease.ack();
    return true;
  }

  /** No more producers: waiting `acquire`s reject; consumers drain what is queued, then get `null`. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const w of this.#producers.splice(0)) {
      w.cleanup();
      w.reject(closedError());
    }
    this.#endConsumersIfDrained();
  }

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Counters for logs and the dashboard. */
  stats(): BufferStats {
    const c = this.#counts;
    return {
      queueSize: this.queueSize,
      queued: this.#queue.length,
      freeSlots: this.#free,
      producing: this.#producing,
      leased: this.#leased,
      committed: c.committed,
      acked: c.acked,
      aborted: c.aborted,
      redelivered: c.redelivered,
      staleTokens: c.staleTokens,
      staleMean: c.staleTokens ? c.staleSum / c.staleTokens : 0,
      staleMax: c.staleMax,
    };
  }

  /** Closed, nothing queued, and no lease out that could still be nacked back. */
  #drained(): boolean {
    return this.#closed && this.#queue.length === 0 && this.#leased === 0;
  }

  #endConsumersIfDrained(): void {
    if (!this.#drained()) return;
    for (const w of this.#consumers.splice(0)) {
      w.cleanup();
      w.resolve(null);
    }
  }

  #grantSlot(): BufferSlot<M> {
    this.#free--;
    this.#producing++;
    return new BufferSlot<M>(
      (items, meta) => {
        this.#producing--;
        this.#counts.committed++;
        const batch: BufferBatch<M> = {
          id: this.#nextId++,
          trajectories: items,
          meta,
          redeliveries: 0,
        };
        this.#holdsSlot.add(batch);
        this.#enqueue(batch, false);
      },
      () => {
        this.#producing--;
        this.#counts.aborted++;
        this.#releaseSlot();
      },
    );
  }

  #releaseSlot(): void {
    this.#free++;
    while (this.#free > 0 && this.#producers.length > 0) {
      const w = this.#producers.shift() as Waiter<BufferSlot<M>>;
      w.cleanup();
      w.resolve(this.#grantSlot());
    }
  }

  #enqueue(batch: BufferBatch<M>, front: boolean): void {
    if (front) this.#queue.unshift(batch);
    else this.#queue.push(batch);
    while (this.#queue.length > 0 && this.#consumers.length > 0) {
      const w = this.#consumers.shift() as Waiter<BatchLease<M> | null>;
      w.cleanup();
      w.resolve(this.#lease(undefined));
    }
  }

  #lease(currentVersion: number | undefined): BatchLease<M> {
    const batch = this.#queue.shift() as BufferBatch<M>;
    this.#leased++;
    if (this.#holdsSlot.delete(batch)) this.#releaseSlot();
    let done = false;
    const settle = (op: string) => {
      if (done)
        throw new AlgorithmError('SHAPE_MISMATCH', `lease.${op}() after the lease was settled`, {
          field: 'lease',
        });
      done = true;
      this.#leased--;
    };
    const lease: BatchLease<M> = {
      batch,
      ack: () => {
        settle('ack');
        this.#counts.acked++;
        this.#endConsumersIfDrained();
      },
      nack: () => {
        settle('nack');
        this.#counts.redelivered++;
        this.#enqueue({ ...batch, redeliveries: batch.redeliveries + 1 }, true);
      },
    };
    return this.#withStaleness(lease, currentVersion);
  }

  #withStaleness(lease: BatchLease<M>, currentVersion: number | undefined): BatchLease<M> {
    if (currentVersion === undefined || lease.staleness) return lease;
    const s = stalenessStats(lease.batch.trajectories, currentVersion);
    const c = this.#counts;
    c.staleSum += s.mean * s.tokens;
    c.staleTokens += s.tokens;
    c.staleMax = Math.max(c.staleMax, s.max);
    return { ...lease, staleness: s };
  }

  #wait<T>(list: Waiter<T>[], signal?: AbortSignal): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => {
        const i = list.indexOf(w);
        if (i >= 0) list.splice(i, 1);
        reject(signal?.reason);
      };
      const w: Waiter<T> = {
        resolve,
        reject,
        cleanup: () => signal?.removeEventListener('abort', onAbort),
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      list.push(w);
    });
  }
}

function closedError(): AlgorithmError {
  return new AlgorithmError('BUFFER_CLOSED', 'the trajectory buffer is closed');
}
