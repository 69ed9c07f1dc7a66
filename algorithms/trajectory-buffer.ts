/**
 * The bounded rollout → trainer buffer of async training. It holds at most `queueSize`
 * (ASYNC_QUEUE_SIZE) batches: a producer takes a slot before it generates, so it blocks rather
 * than drops when the trainer falls behind; the slot is returned when the trainer takes the
 * batch, so generation of the next batch overlaps training of this one.
 *
 * Nothing is lost or duplicated when a producer fails: a batch enters the queue atomically on
 * `commit`; a producer that fails calls `abort`, which returns its slot and hands back the
 * trajectories it had staged. A trainer that fails ends the run (`train_ppo` resumes from a
 * checkpoint), so a taken batch is not given back: `ack` settles it.
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
}

/** A batch handed to a consumer; `ack` follows once it was trained on. */
export interface BatchLease<M = Readonly<Record<string, unknown>>> {
  readonly batch: BufferBatch<M>;
  /** Per-token staleness against the `currentVersion` given to `take`, if any. */
  readonly staleness?: StalenessStats;
  /** The batch was trained on; it is gone. */
  ack(): void;
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
 * it and the trainer consumes from it (`train/ppo/async-loop.ts`).
 *
 * @example
 * const buf = new TrajectoryBuffer({ queueSize: 2 });
 * // rollout loop
 * const slot = await buf.acquire();
 * try { slot.add(...(await generateBatch())); } catch (e) { slot.abort(); throw e; }
 * slot.commit({ step });
 * // trainer loop
 * const lease = await buf.take({ currentVersion });
 * if (lease) { await train(lease.batch.trajectories); lease.ack(); }
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
  #counts = {
    committed: 0,
    acked: 0,
    aborted: 0,
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
  take(
    opts: { currentVersion?: number; signal?: AbortSignal } = {},
  ): Promise<BatchLease<M> | null> {
    if (opts.signal?.aborted) return Promise.reject(opts.signal.reason);
    if (this.#queue.length > 0 && this.#consumers.length === 0)
      return Promise.resolve(this.#lease(opts.currentVersion));
    if (this.#drained()) return Promise.resolve(null);
    return this.#wait(this.#consumers, opts.signal).then((l) =>
      l ? this.#withStaleness(l, opts.currentVersion) : l,
    );
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
      staleTokens: c.staleTokens,
      staleMean: c.staleTokens ? c.staleSum / c.staleTokens : 0,
      staleMax: c.staleMax,
    };
  }

  /** Closed and nothing queued. */
  #drained(): boolean {
    return this.#closed && this.#queue.length === 0;
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
        this.#enqueue({ id: this.#nextId++, trajectories: items, meta });
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

  #enqueue(batch: BufferBatch<M>): void {
    this.#queue.push(batch);
    while (this.#queue.length > 0 && this.#consumers.length > 0) {
      const w = this.#consumers.shift() as Waiter<BatchLease<M> | null>;
      w.cleanup();
      w.resolve(this.#lease(undefined));
    }
  }

  #lease(currentVersion: number | undefined): BatchLease<M> {
    const batch = this.#queue.shift() as BufferBatch<M>;
    this.#leased++;
    this.#releaseSlot();
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
