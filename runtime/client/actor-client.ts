/**
 * The caller's side of one actor: finds its worker through the head, sends calls straight to it
 * in order, and handles its failures. A call in flight when the worker dies is re-sent to the
 * restarted actor while its retries last; otherwise it fails with `ActorDiedError` naming the
 * cause. Calls made while the actor restarts wait for it; once it is DEAD they fail fast.
 *
 * @module
 */
import {
  ActorDiedError,
  ActorLoadError,
  ObjectLostError,
  OutOfMemoryError,
  type RtjobError,
  TaskCancelledError,
  fromWire,
  isRtjobError,
} from '../errors.ts';
import type { CallOptions } from '../handles.ts';
import type {
  ActorLocation,
  AnyRequestBody,
  Call,
  DeathCause,
  ReplyOf,
  StreamItem,
} from '../protocol.ts';
import type { Connection, RequestOptions } from '../transport.ts';
import { ObjectRef } from './object-ref.ts';
import { ObjectRefGenerator } from './ref-generator.ts';
import { ShmValue, readShm } from './shm.ts';

/**
 * What an actor client asks of its process's runtime (`Runtime` in `runtime.ts`, which creates
 * the clients): ids, the head, and connections to other workers.
 */
export interface ActorClientRuntime {
  /** This process's address, the owner of the refs it creates. */
  readonly address: string;
  /** Where a streaming call's items go as they arrive, by call id. */
  readonly streams: Map<string, (m: StreamItem) => void>;
  /** The head is gone and will not come back. */
  readonly headLostForGood: boolean;
  newId(): string;
  peer(address: string): Promise<Connection>;
  headRequest(
    body: Extract<AnyRequestBody, { type: 'waitActor' }>,
    opts?: RequestOptions,
  ): Promise<ReplyOf<'waitActor'>>;
}

interface QueuedCall {
  method: string;
  args: unknown[];
  ref: ObjectRef<unknown>;
  retriesLeft: number;
  /** The client that sends it (what `cancel` of its ref asks). */
  client: ActorClient;
  /** The actor's concurrency group, when not the default. */
  group?: string;
  /** A streaming call's generator (its `ref` settles with the item count). */
  stream?: ObjectRefGenerator<unknown>;
  backpressure?: number;
  /** The connection it was last sent on, and its request id there (what `cancelCall` names). */
  conn?: Connection;
  rid?: number;
}

/** How `ActorClient.call` runs one call. */
export interface CallSettings {
  /** Re-sends after the worker died (-1: always). @default the actor's `maxTaskRetries` */
  retries?: number;
  /** The actor's concurrency group. @default the default group */
  group?: string;
  /** Streaming (see `ObjectRefGenerator`), with this many unconsumed items at most (0: no limit). */
  stream?: { backpressure: number };
}

/** Calls to one actor from this process. */
export class ActorClient {
  private conn: Connection | undefined;
  private incarnation = 0;
  private connecting = false;
  private queue: QueuedCall[] = [];
  /** Calls in flight when the worker died that will be re-sent (they go before `queue`). */
  private retries: QueuedCall[] = [];
  private dead: RtjobError | undefined;
  private lost = new Map<Connection, Promise<ActorLocation>>();
  private stopped = false;

  constructor(
    private readonly rt: ActorClientRuntime,
    readonly actorId: string,
    private created: Promise<unknown> | undefined,
    readonly maxTaskRetries: number,
  ) {}

  /** Resolves once the actor is ALIVE; rejects when it cannot be created or is DEAD. */
  async ready(): Promise<void> {
    if (this.dead) throw this.dead;
    if (this.conn && !this.conn.closed) return;
    await new Promise<void>((resolve, reject) => {
      const ref = new ObjectRef<unknown>('ready', '');
      this.queue.push({ method: '', args: [], ref, retriesLeft: 0, client: this });
      ref._onSettled((r) => {
        try {
          r._take();
          resolve();
        } catch (e) {
          reject(e);
        }
      });
      this.ensureConnected();
    });
  }

  /** Sends `method(...args)`; the returned ref settles with the result. */
  call(method: string, args: unknown[], retries = this.maxTaskRetries): ObjectRef<unknown> {
    return this.start(method, args, { retries }).ref;
  }

  /**
   * Sends a streaming call of generator method `method`: items arrive on the returned generator.
   * Never re-sent (a restarted actor would start the stream over): a worker that dies fails the
   * next item with `ActorDiedError`.
   */
  stream(
    method: string,
    args: unknown[],
    settings: Omit<CallSettings, 'retries' | 'stream'> & { backpressure?: number },
  ): ObjectRefGenerator<unknown> {
    const c = this.start(method, args, {
      group: settings.group,
      retries: 0,
      stream: { backpressure: settings.backpressure ?? 0 },
    });
    return c.stream!;
  }

  /** Sends a call with `settings`. */
  callWith(method: string, args: unknown[], settings: CallSettings): ObjectRef<unknown> {
    return this.start(method, args, settings).ref;
  }

  private start(method: string, args: unknown[], settings: CallSettings): QueuedCall {
    const ref = new ObjectRef<unknown>(this.rt.newId(), this.rt.address);
    const c: QueuedCall = {
      method,
      args,
      ref,
      retriesLeft: settings.retries ?? this.maxTaskRetries,
      client: this,
    };
    // The ref leads `cancel` to its call (no per-call map: this is every call's path).
    ref._call = c;
    if (settings.group !== undefined) c.group = settings.group;
    if (settings.stream) {
      const gen = new ObjectRefGenerator<unknown>(
        ref.id,
        () => new ObjectRef<unknown>(this.rt.newId(), this.rt.address),
      );
      c.stream = gen;
      gen._call = c;
      c.backpressure = settings.stream.backpressure;
      // Items may arrive after the reply (large ones take the bulk link): the route stays until
      // every item came or the consumer left.
      const streams = this.rt.streams;
      streams.set(ref.id, (m) => {
        gen._item(
          m.index,
          m.value,
          m.error ? fromWire(m.error, { actorId: this.actorId, method }) : undefined,
        );
        if (gen._complete) streams.delete(ref.id);
      });
      gen._cancel = () => {
        streams.delete(ref.id);
        this.cancel(c);
      };
      ref._onSettled((r) => {
        try {
          gen._end(r._take() as number);
          if (gen._complete) streams.delete(ref.id);
        } catch (e) {
          streams.delete(ref.id);
          gen._fail(e);
        }
      });
    }
    if (this.dead) {
      ref._reject(this.dead);
      return c;
    }
    const conn = this.conn;
    if (
      conn !== undefined &&
      this.queue.length === 0 &&
      this.retries.length === 0 &&
      !conn.closed
    ) {
      this.send(conn, c);
    } else {
      this.queue.push(c);
      this.ensureConnected();
    }
    return c;
  }

  /**
   * Cancels call `c` if it is not answered yet: a queued one is dropped, a sent one is told to
   * stop (the worker aborts its signal, or never starts it). The caller sees
   * `TaskCancelledError` at once. False when the call was already answered.
   */
  private cancel(c: QueuedCall): boolean {
    if (c.ref.isSettled) return false;
    const err = new TaskCancelledError(
      `call ${c.ref.id} ('${c.method}') to actor ${this.actorId} was cancelled`,
      { context: { actorId: this.actorId, method: c.method } },
    );
    for (const list of [this.retries, this.queue]) {
      const i = list.indexOf(c);
      if (i >= 0) {
        list.splice(i, 1);
        c.ref._reject(err);
        return true;
      }
    }
    const conn = c.conn;
    if (conn && !conn.closed && c.rid !== undefined) {
      conn.send({ type: 'cancelCall', callRid: c.rid });
    }
    c.ref._reject(err);
    return true;
  }

  /**
   * Cancels the unanswered call behind `target` (a call's ref or a streaming call's generator)
   * made by this process; returns its actor's client, or undefined when there is no such call.
   */
  static cancelOf(
    target: ObjectRef<unknown> | ObjectRefGenerator<unknown>,
  ): ActorClient | undefined {
    const c = target._call as QueuedCall | undefined;
    return c?.client.cancel(c) ? c.client : undefined;
  }

  /** Fails everything queued (process shutting down). */
  shutdown(): void {
    this.stopped = true;
    const err = new ActorDiedError(`the runtime shut down before calling actor ${this.actorId}`, {
      context: { actorId: this.actorId },
    });
    for (const c of [...this.retries.splice(0), ...this.queue.splice(0)]) c.ref._reject(err);
  }

  private send(conn: Connection, c: QueuedCall): void {
    if (c.method === '') {
      c.ref._resolve(undefined); // a readiness probe
      return;
    }
    const callId = c.ref.id;
    const stream = c.stream;
    if (stream && c.backpressure) {
      let acked = 0;
      const every = Math.max(1, c.backpressure >> 1);
      stream._ack = (consumed) => {
        // Acks are batched (half the window), so a consumer that keeps up sends few of them.
        if (consumed - acked < every || conn.closed) return;
        acked = consumed;
        conn.send({ type: 'streamAck', callId, consumed });
      };
    }
    c.conn = conn;
    // Built without spreads: this is the hot path of every call. A call is named by its request
    // id on the connection (`cancelCall`); only a stream's items need the call id.
    const msg: { -readonly [K in keyof Call]: Call[K] } = {
      type: 'call',
      rid: 0,
      method: c.method,
      args: c.args,
    };
    if (c.group !== undefined) msg.group = c.group;
    if (stream) {
      msg.callId = callId;
      msg.stream = true;
      msg.backpressure = c.backpressure ?? 0;
    }
    conn.requestCb(msg, (err, v) => {
      if (err) this.onCallFailed(conn, c, err);
      else if (v instanceof ShmValue) this.readShared(c, v);
      else c.ref._resolve(v);
    });
    c.rid = msg.rid; // requestCb numbered it
  }

  /** A large result the worker handed over through shared memory (we are on its machine). */
  private readShared(c: QueuedCall, v: ShmValue): void {
    readShm(v).then(
      (value) => c.ref._resolve(value),
      (e) =>
        c.ref._reject(
          new ObjectLostError(
            `the result of '${c.method}' could not be read from shared memory: ${(e as Error).message}`,
            {
              context: { actorId: this.actorId, method: c.method },
            },
          ),
        ),
    );
  }

  private onCallFailed(conn: Connection, c: QueuedCall, e: unknown): void {
    if (!isRtjobError(e, 'CONNECTION') || !conn.closed) {
      c.ref._reject(e);
      return;
    }
    if (this.conn === conn) this.conn = undefined;
    if (c.retriesLeft !== 0 && !this.stopped) {
      // Re-sent before any call made after the failure, in their original order.
      c.retriesLeft = c.retriesLeft > 0 ? c.retriesLeft - 1 : -1;
      this.retries.push(c);
      this.ensureConnected();
      return;
    }
    this.whyLost(conn).then(
      (loc) => {
        if (loc.state === 'DEAD') this.markDead(loc);
        c.ref._reject(loc.state === 'DEAD' ? this.dead : this.diedError(loc.lastDeath, c.method));
      },
      (err) => c.ref._reject(this.headGone(err) ?? err),
    );
  }

  /**
   * Waits (without holding the process) for the head to say `incarnation` ended, then drops the
   * connection to it: calls in flight fail over at once instead of when the socket times out.
   */
  private watch(conn: Connection, incarnation: number): void {
    this.rt
      .headRequest(
        {
          type: 'waitActor',
          actorId: this.actorId,
          afterIncarnation: incarnation,
          untilAlive: false,
        },
        { holdProcess: false },
      )
      .then(
        () => {
          if (!conn.closed)
            conn.close(`the head ended incarnation ${incarnation} of actor ${this.actorId}`);
        },
        () => {},
      );
  }

  /** Asks the head what happened to the incarnation behind `conn` (once per connection). */
  private whyLost(conn: Connection): Promise<ActorLocation> {
    let p = this.lost.get(conn);
    if (!p) {
      p = this.rt.headRequest({
        type: 'waitActor',
        actorId: this.actorId,
        afterIncarnation: this.incarnation,
        untilAlive: false,
      });
      this.lost.set(conn, p);
      p.finally(() => setTimeout(() => this.lost.delete(conn), 1000).unref()).catch(() => {});
    }
    return p;
  }

  private ensureConnected(): void {
    if (this.connecting || this.stopped) return;
    this.connecting = true;
    void this.connectLoop().finally(() => {
      this.connecting = false;
      if (this.queue.length + this.retries.length > 0 && !this.dead && !this.stopped)
        this.ensureConnected();
    });
  }

  private async connectLoop(): Promise<void> {
    try {
      if (this.created) {
        await this.created;
        this.created = undefined;
      }
      for (;;) {
        const loc = await this.rt.headRequest({
          type: 'waitActor',
          actorId: this.actorId,
          afterIncarnation: this.incarnation,
          untilAlive: true,
        });
        if (loc.state === 'DEAD') {
          this.markDead(loc);
          break;
        }
        let conn: Connection;
        try {
          conn = await this.rt.peer(loc.address!);
        } catch {
          // It died between the head's answer and our connect; ask again for the next one.
          this.incarnation = loc.incarnation;
          continue;
        }
        this.incarnation = loc.incarnation;
        this.conn = conn;
        // Fencing: the worker checks it is this incarnation before any call below runs, and the
        // head tells us when the incarnation ends (a node declared dead) so calls fail over then.
        conn.requestCb(
          { type: 'ping', actorId: this.actorId, incarnation: loc.incarnation },
          () => {},
        );
        this.watch(conn, loc.incarnation);
        const q = [...this.retries, ...this.queue];
        this.retries = [];
        this.queue = [];
        for (const c of q) this.send(conn, c);
        return;
      }
    } catch (e) {
      this.dead = this.headGone(e) ?? (e as RtjobError);
    }
    const err = this.dead!;
    for (const c of [...this.retries.splice(0), ...this.queue.splice(0)]) c.ref._reject(err);
  }

  /**
   * When `e` says this process lost the head for good: the error its calls fail with. The head
   * kills the non-detached actors of an owner it lost (`owner-died`), and this process can no
   * longer find any actor.
   */
  private headGone(e: unknown): RtjobError | undefined {
    if (!isRtjobError(e, 'CONNECTION') || !this.rt.headLostForGood) return undefined;
    return new ActorDiedError(`actor ${this.actorId} is out of reach: ${(e as Error).message}`, {
      context: { actorId: this.actorId, reason: 'owner-died' },
      cause: e,
    });
  }

  private markDead(loc: ActorLocation): void {
    const cause = loc.deathCause;
    if (cause?.reason === 'load-failed' && cause.error) {
      const inner = fromWire(cause.error);
      this.dead = new ActorLoadError(inner.message, {
        context: { ...inner.context, actorId: this.actorId },
        remoteStack: inner.remoteStack,
        cause: inner.cause,
      });
      return;
    }
    const Died = cause?.reason === 'out-of-memory' ? OutOfMemoryError : ActorDiedError;
    this.dead = new Died(`actor ${this.actorId} is dead: ${cause?.message ?? 'unknown cause'}`, {
      context: this.causeContext(cause),
    });
  }

  private diedError(
    cause: DeathCause | undefined,
    method: string,
  ): ActorDiedError | OutOfMemoryError {
    if (cause?.reason === 'out-of-memory') {
      return new OutOfMemoryError(
        `actor ${this.actorId} died while '${method}' was in flight: ${cause.message}`,
        { context: { ...this.causeContext(cause), method } },
      );
    }
    return new ActorDiedError(
      `actor ${this.actorId} died while '${method}' was in flight: ${cause?.message ?? 'unknown cause'}`,
      { context: { ...this.causeContext(cause), method } },
    );
  }

  private causeContext(cause: DeathCause | undefined) {
    return {
      actorId: this.actorId,
      reason: cause?.reason,
      exitCode: cause?.exitCode,
      signal: cause?.signal,
      stderrTail: cause?.stderrTail,
      // out-of-memory: the node, the usage and the process (MemoryKill's fields)
      ...cause?.memory,
    };
  }
}

/**
 * A handle's call with its per-call options (`handle.m.options(o).remote(...)`): a ref, or an
 * `ObjectRefGenerator` for a streaming call.
 */
export function callWithOptions(
  client: ActorClient,
  method: string,
  args: unknown[],
  o: CallOptions | undefined,
): ObjectRef<unknown> | ObjectRefGenerator<unknown> {
  if (o === undefined) return client.call(method, args);
  if (o.numReturns === 'streaming') {
    return client.stream(method, args, {
      group: o.concurrencyGroup,
      backpressure: o.generatorBackpressure ?? 0,
    });
  }
  return client.callWith(method, args, { retries: o.maxTaskRetries, group: o.concurrencyGroup });
}
