/**
 * Collective groups (Ray's `ray.util.collective` idea): N processes, usually actors, join a named
 * group with a rank each and then all-reduce, broadcast and barrier over direct TCP connections
 * between them, arranged as a ring. The head is only the meeting point (its KV holds each
 * member's address); the data never passes through it.
 *
 * Every member must call the same operations in the same order with the same sizes, as with
 * MPI or NCCL. A member that dies, leaves or stalls makes every other member's operation fail
 * with `CollectiveError` (`code: 'COLLECTIVE'`): at once when its sockets close (a killed
 * process), else when the operation's timeout passes. A failed group stays failed.
 *
 * @example
 * // inside an actor method, rank and world size given by whoever created the actors
 * const group = await initCollectiveGroup({ name: 'dp', worldSize: 2, rank });
 * await group.allreduce(grads, { op: 'mean' }); // grads: Record<string, Float32Array>, in place
 * await group.broadcast(weights, { root: 0 });
 * await group.barrier();
 * group.destroy();
 *
 * The `backend` option picks what carries the data: this ring (`'ring'`, the default), or a c10d
 * process group in libtorch (`'gloo'`, `'nccl'`; `backend.ts`), which a torch.distributed
 * process can join too (`initMethod: 'tcp://host:port'`).
 *
 * @module
 */
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { currentRuntime } from '../client/runtime.ts';
import { CollectiveError, InvalidArgumentError, NotInitializedError } from '../errors.ts';
import {
  type Collective,
  type CollectiveBackend,
  type DeviceTensor,
  type OpOptions,
  type StoreMeeting,
  collectiveBackendJoin,
  collectiveBackends,
} from './backend.ts';
import { type RingLinks, RendezvousError, formRing } from './rendezvous.ts';
import { RingMismatch, RingOp, opKind } from './ring.ts';

/** Options for `initCollectiveGroup`. */
export interface CollectiveGroupOptions {
  /** Group name, shared by every member; one live group per name at a time. */
  name: string;
  /** Number of members. */
  worldSize: number;
  /** This member's rank, 0 ≤ rank < worldSize. */
  rank: number;
  /** How long one operation may take before the group fails with `reason: 'timeout'`. @default 60000 */
  timeoutMs?: number;
  /** How long to wait for every member to join. @default 120000 */
  joinTimeoutMs?: number;
  /** What carries the collectives (`backend.ts`). @default 'ring' */
  backend?: CollectiveBackend;
  /**
   * `gloo`/`nccl` only: torch.distributed's `tcp://host:port` (rank 0 hosts the store there), so
   * any torch.distributed process may be a member; it needs no rtjob runtime. @default the
   * members meet through the head's KV (rank 0 hosts the store on a free port)
   */
  initMethod?: string;
}

/** Defaults of `CollectiveGroupOptions`. */
export const collectiveGroupDefaults = { timeoutMs: 60_000, joinTimeoutMs: 120_000 } as const;

/**
 * What the collectives take: one `Float32Array`, a list of them, or named ones (gradients by
 * parameter name). Named arrays are visited in sorted name order on every member.
 */
export type Tensors =
  | Float32Array
  | readonly Float32Array[]
  | { readonly [name: string]: Float32Array };

/** Options for `allreduce`. */
export interface AllreduceOptions {
  /** `sum`, or `mean` (the sum divided by the world size). @default 'sum' */
  op?: 'sum' | 'mean';
  /** @default the group's `timeoutMs` */
  timeoutMs?: number;
}

/** Options for `broadcast`. */
export interface BroadcastOptions {
  /** The rank whose values everyone receives. @default 0 */
  root?: number;
  /** @default the group's `timeoutMs` */
  timeoutMs?: number;
}

/** Counters of one member. */
export interface CollectiveStats {
  /** Operations completed. */
  readonly ops: number;
  /** Bytes received from the left neighbour, including the operation in progress. */
  readonly bytesReceived: number;
}

const live = new Map<string, CollectiveGroup>();

/**
 * Joins (creates with the others) the group `name` as `rank` of `worldSize`; resolves once the
 * ring is connected, i.e. every member has joined. Call it from each member, in any order.
 */
export async function initCollectiveGroup(
  options: CollectiveGroupOptions & { backend?: 'ring' },
): Promise<CollectiveGroup>;
/** The same on a c10d backend, whose operations also take device tensors (the torch backend's). */
export async function initCollectiveGroup(
  options: CollectiveGroupOptions & { backend: 'gloo' | 'nccl' },
): Promise<Collective<Float32Array | DeviceTensor>>;
export async function initCollectiveGroup(
  options: CollectiveGroupOptions,
): Promise<Collective<Float32Array> | Collective<Float32Array | DeviceTensor>>;
export async function initCollectiveGroup(
  options: CollectiveGroupOptions,
): Promise<Collective<Float32Array> | Collective<Float32Array | DeviceTensor>> {
  const { name, worldSize, rank } = options;
  const backend = options.backend ?? 'ring';
  if (!collectiveBackends.includes(backend)) {
    throw new InvalidArgumentError(
      `collective backend must be one of ${collectiveBackends.join(', ')}, got '${String(backend)}'`,
    );
  }
  if (typeof name !== 'string' || name === '' || name.length > 200) {
    throw new InvalidArgumentError(
      'collective group name must be a non-empty string of ≤ 200 characters',
    );
  }
  if (!Number.isInteger(worldSize) || worldSize < 1) {
    throw new InvalidArgumentError(
      `collective group '${name}': worldSize must be a whole number ≥ 1`,
    );
  }
  if (!Number.isInteger(rank) || rank < 0 || rank >= worldSize) {
    throw new InvalidArgumentError(
      `collective group '${name}': rank must be 0..${worldSize - 1}, got ${rank}`,
    );
  }
  const timeoutMs = options.timeoutMs ?? collectiveGroupDefaults.timeoutMs;
  const joinTimeoutMs = options.joinTimeoutMs ?? collectiveGroupDefaults.joinTimeoutMs;
  for (const [k, v] of Object.entries({ timeoutMs, joinTimeoutMs })) {
    if (!(v > 0)) throw new InvalidArgumentError(`collective group '${name}': ${k} must be > 0`);
  }
  if (backend !== 'ring') return joinC10d(backend, options, timeoutMs, joinTimeoutMs);
  if (options.initMethod !== undefined) {
    throw new InvalidArgumentError(`collective group '${name}': initMethod is for gloo and nccl`);
  }
  const rt = currentRuntime();
  if (!rt) throw new NotInitializedError();
  if (live.has(name)) {
    throw new InvalidArgumentError(
      `this process is already a member of collective group '${name}'`,
    );
  }
  let links: RingLinks;
  try {
    links = await formRing({
      group: name,
      rank,
      worldSize,
      host: rt.server.host,
      token: rt.opts.token,
      kv: {
        put: (key, value) => rt.headOnce({ type: 'kvPut', key, value }),
        get: (key) => rt.headRequest({ type: 'kvGet', key }),
      },
      deadlineMs: Date.now() + joinTimeoutMs,
    });
  } catch (e) {
    const reason = e instanceof RendezvousError ? e.reason : 'member-left';
    throw new CollectiveError(
      `joining collective group '${name}' as rank ${rank} failed: ${(e as Error).message}`,
      {
        context: { group: name, rank, reason },
        cause: e,
      },
    );
  }
  const group = new CollectiveGroup(name, rank, worldSize, timeoutMs, links);
  live.set(name, group);
  rt.onClose(() => group.destroy());
  return group;
}

/** A c10d group: the registered backend joins; the runtime (when there is one) is the meeting point. */
async function joinC10d(
  backend: 'gloo' | 'nccl',
  options: CollectiveGroupOptions,
  timeoutMs: number,
  joinTimeoutMs: number,
): Promise<Collective<Float32Array | DeviceTensor>> {
  const { name, rank, worldSize, initMethod } = options;
  const join = collectiveBackendJoin(backend);
  const rt = currentRuntime();
  if (initMethod === undefined && !rt) throw new NotInitializedError();
  const meet: StoreMeeting | undefined = rt && {
    host: rt.server.host,
    publish: (url) => rt.headOnce({ type: 'kvPut', key: storeKey(name), value: Buffer.from(url) }),
    lookup: async (deadlineMs) => {
      let delayMs = 10;
      while (Date.now() < deadlineMs) {
        const raw = await rt.headRequest({ type: 'kvGet', key: storeKey(name) });
        if (raw && raw.length > 0) return Buffer.from(raw).toString('utf8');
        // The head's KV tells of a new entry only when asked: polling is how one waits for it.
        await sleep(delayMs);
        delayMs = Math.min(delayMs * 2, 200);
      }
      throw new CollectiveError(
        `joining collective group '${name}' as rank ${rank}: rank 0 published no store address before the join timeout`,
        { context: { group: name, rank, reason: 'timeout' } },
      );
    },
  };
  const group = await join({
    name,
    rank,
    worldSize,
    timeoutMs,
    joinDeadlineMs: Date.now() + joinTimeoutMs,
    ...(initMethod !== undefined ? { initMethod } : {}),
    ...(meet ? { meet } : {}),
  });
  rt?.onClose(() => group.destroy());
  return group;
}

function storeKey(group: string): string {
  return `collective/${group}/store`;
}

/** One member's handle on a ring collective group. */
export class CollectiveGroup implements Collective<Float32Array> {
  readonly backend = 'ring';

  private tail: Promise<unknown> = Promise.resolve();
  private broken: CollectiveError | undefined;
  private current: RingOp | undefined;
  private currentName = '';
  private pending: Buffer[] = [];
  private seq = 0;
  private opsDone = 0;
  private bytesDone = 0;
  private scratch = new Float32Array(0);

  /** @internal Use `initCollectiveGroup`. */
  constructor(
    readonly name: string,
    readonly rank: number,
    readonly worldSize: number,
    private readonly timeoutMs: number,
    private readonly links: RingLinks,
  ) {
    const n = worldSize;
    this.watch(links.left, (rank - 1 + n) % n, 'left');
    this.watch(links.right, (rank + 1) % n, 'right');
    links.left?.on('data', (b: Buffer) => this.onLeftData(b));
    links.left?.resume();
  }

  /**
   * Reduces `tensors` across the group, in place, and resolves with them: afterwards every
   * member holds the same bits (the sum, or the mean with `op: 'mean'`).
   */
  async allreduce<T extends Tensors>(tensors: T, opts: AllreduceOptions = {}): Promise<T> {
    const op = opts.op ?? 'sum';
    if (op !== 'sum' && op !== 'mean')
      throw new InvalidArgumentError(`allreduce op must be 'sum' or 'mean', got '${String(op)}'`);
    const arrays = arraysOf(tensors, 'allreduce');
    return this.enqueue(`allreduce(${op})`, opts.timeoutMs, arrays, (data, seq, done) => {
      const expected = { seq, kind: opKind[op], count: data.length };
      return RingOp.allreduce(
        new RingOp(data, this.links.right, expected, done),
        this.rank,
        this.worldSize,
        op === 'mean',
      );
    }).then(() => tensors);
  }

  /** Overwrites `tensors` on every member with the root's values, in place; same sizes everywhere. */
  async broadcast<T extends Tensors>(tensors: T, opts: BroadcastOptions = {}): Promise<T> {
    const root = opts.root ?? 0;
    if (!Number.isInteger(root) || root < 0 || root >= this.worldSize) {
      throw new InvalidArgumentError(
        `broadcast root must be 0..${this.worldSize - 1}, got ${root}`,
      );
    }
    const arrays = arraysOf(tensors, 'broadcast');
    return this.enqueue(
      `broadcast(root ${root})`,
      opts.timeoutMs,
      arrays,
      (data, seq, done) => {
        const expected = { seq, kind: opKind.broadcast | (root << 8), count: data.length };
        return RingOp.broadcast(
          new RingOp(data, this.links.right, expected, done),
          this.rank,
          this.worldSize,
          root,
        );
      },
      this.rank === root,
    ).then(() => tensors);
  }

  /**
   * `output` (worldSize × `input`'s length) becomes every rank's `input` in rank order: one
   * all-reduce of `output` holding this rank's part and zeros elsewhere (x + 0 is x exactly; a
   * -0 arrives as +0).
   */
  async allGather<O extends Float32Array>(
    output: O,
    input: Float32Array,
    opts: OpOptions = {},
  ): Promise<O> {
    if (output.length !== input.length * this.worldSize)
      throw new InvalidArgumentError(
        `allGather: output must hold worldSize (${this.worldSize}) × ${input.length} elements, has ${output.length}`,
      );
    output.fill(0);
    output.set(input, this.rank * input.length);
    await this.allreduce(output, { op: 'sum', ...opts });
    return output;
  }

  /**
   * `output` becomes this rank's chunk of the sum of every rank's `input`: one all-reduce of a
   * copy of `input` (twice the bytes of a true reduce-scatter).
   */
  async reduceScatter<O extends Float32Array>(
    output: O,
    input: Float32Array,
    opts: OpOptions = {},
  ): Promise<O> {
    const n = output.length;
    if (input.length !== n * this.worldSize)
      throw new InvalidArgumentError(
        `reduceScatter: input must hold worldSize (${this.worldSize}) × ${n} elements, has ${input.length}`,
      );
    const sum = input.slice();
    await this.allreduce(sum, { op: 'sum', ...opts });
    output.set(sum.subarray(this.rank * n, (this.rank + 1) * n));
    return output;
  }

  /** Resolves once every member has called `barrier`. */
  async barrier(opts: { timeoutMs?: number } = {}): Promise<void> {
    const token = new Float32Array(this.worldSize);
    await this.enqueue('barrier', opts.timeoutMs, [token], (data, seq, done) => {
      const expected = { seq, kind: opKind.barrier, count: data.length };
      return RingOp.allreduce(
        new RingOp(data, this.links.right, expected, done),
        this.rank,
        this.worldSize,
        false,
      );
    });
  }

  /** Counters (operations done, bytes received). */
  stats(): CollectiveStats {
    return {
      ops: this.opsDone,
      bytesReceived: this.bytesDone + (this.current?.bytesReceived ?? 0),
    };
  }

  /**
   * Leaves the group: closes its connections. The other members' next (or current) operation
   * fails with `reason: 'member-left'`; the name can then be joined again.
   */
  destroy(): void {
    this.abort(
      new CollectiveError(`collective group '${this.name}' was destroyed on rank ${this.rank}`, {
        context: { group: this.name, rank: this.rank, reason: 'destroyed' },
      }),
    );
  }

  private enqueue(
    what: string,
    timeoutMs: number | undefined,
    arrays: readonly Float32Array[],
    plan: (data: Float32Array, seq: number, done: (err?: Error) => void) => RingOp,
    readOnly = false,
  ): Promise<void> {
    const seq = this.seq++;
    const run = () => this.run(what, timeoutMs ?? this.timeoutMs, arrays, seq, plan, readOnly);
    const p = this.tail.then(run, run);
    this.tail = p.catch(() => {});
    return p;
  }

  private run(
    what: string,
    timeoutMs: number,
    arrays: readonly Float32Array[],
    seq: number,
    plan: (data: Float32Array, seq: number, done: (err?: Error) => void) => RingOp,
    readOnly: boolean,
  ): Promise<void> {
    if (this.broken) return Promise.reject(this.broken);
    const total = arrays.reduce((s, a) => s + a.length, 0);
    if (total > 0xffffffff)
      throw new InvalidArgumentError(`${what}: at most 2^32-1 elements per call`);
    // One array is reduced where it lies; several are packed into a scratch buffer and back.
    let data: Float32Array;
    if (arrays.length === 1) data = arrays[0]!;
    else {
      if (this.scratch.length < total) this.scratch = new Float32Array(total);
      data = this.scratch.subarray(0, total);
      let o = 0;
      for (const a of arrays) {
        data.set(a, o);
        o += a.length;
      }
    }
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.abort(
          new CollectiveError(
            `collective group '${this.name}': ${what} #${seq} on rank ${this.rank} timed out after ${timeoutMs} ms (a member is missing, stalled or unreachable)`,
            { context: { group: this.name, rank: this.rank, reason: 'timeout', op: what } },
          ),
        );
      }, timeoutMs);
      const done = (err?: Error) => {
        clearTimeout(timer);
        const op = this.current;
        this.current = undefined;
        if (op) this.bytesDone += op.bytesReceived;
        if (err) {
          this.abort(this.errorFor(err, what));
          reject(this.broken);
          return;
        }
        if (data !== arrays[0] && !readOnly) {
          let o = 0;
          for (const a of arrays) {
            a.set(data.subarray(o, o + a.length));
            o += a.length;
          }
        }
        this.opsDone++;
        resolve();
      };
      if (this.worldSize === 1) return done();
      this.currentName = what;
      let finished = false;
      const op = plan(data, seq, (err) => {
        finished = true;
        done(err);
      });
      // A neighbour's bytes for this operation may already be queued; they go in now.
      if (!finished) this.current = op;
      const queued = this.pending;
      this.pending = [];
      for (const b of queued) this.onLeftData(b);
    });
  }

  private onLeftData(b: Buffer): void {
    const op = this.current;
    if (!op) {
      this.pending.push(b);
      return;
    }
    const rest = op.feed(b);
    if (rest) this.pending.push(rest);
  }

  private errorFor(err: Error, what: string): CollectiveError {
    if (err instanceof CollectiveError) return err;
    if (err instanceof RingMismatch) {
      return new CollectiveError(
        `collective group '${this.name}' on rank ${this.rank}: ${err.message}`,
        {
          context: { group: this.name, rank: this.rank, reason: 'mismatch', op: what },
        },
      );
    }
    return new CollectiveError(
      `collective group '${this.name}': ${what} on rank ${this.rank} failed: ${err.message}`,
      {
        context: { group: this.name, rank: this.rank, reason: 'member-left', op: what },
        cause: err,
      },
    );
  }

  private watch(sock: Socket | undefined, peer: number, side: 'left' | 'right'): void {
    if (!sock) return;
    // The group's sockets never keep a process alive on their own; an operation's timer does.
    sock.unref();
    const lost = (why: string) => {
      if (this.broken) return;
      const during = this.current ? ` during ${this.currentName}` : '';
      this.abort(
        new CollectiveError(
          `collective group '${this.name}': rank ${peer} (${side} neighbour of rank ${this.rank}) left${during}: ${why}`,
          { context: { group: this.name, rank: this.rank, peerRank: peer, reason: 'member-left' } },
        ),
      );
    };
    sock.on('error', (e) => lost(e.message));
    sock.on('end', () => lost('connection closed'));
    sock.on('close', () => lost('connection closed'));
    if (side === 'right') sock.resume();
    // It may have closed while the rest of the ring was still forming.
    if (sock.destroyed) queueMicrotask(() => lost('connection closed while the group formed'));
  }

  private abort(err: CollectiveError): void {
    if (this.broken) return;
    this.broken = err;
    if (live.get(this.name) === this) live.delete(this.name);
    this.pending = [];
    this.links.left?.destroy();
    this.links.right?.destroy();
    const op = this.current;
    this.current = undefined;
    op?.fail(err);
  }
}

function arraysOf(t: Tensors, what: string): readonly Float32Array[] {
  if (t instanceof Float32Array) return [t];
  const list = Array.isArray(t)
    ? (t as readonly Float32Array[])
    : Object.keys(t)
        .sort()
        .map((k) => (t as Record<string, Float32Array>)[k]!);
  for (const a of list) {
    if (!(a instanceof Float32Array)) {
      throw new InvalidArgumentError(`${what} takes Float32Arrays (one, a list, or named)`);
    }
  }
  return list;
}
