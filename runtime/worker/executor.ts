/**
 * Runs calls against the hosted actor (or task functions). Calls run in concurrency groups: the
 * default group runs at most `maxConcurrency` calls at once, and each group the actor declared
 * (`concurrencyGroups: { io: 4 }`) its own number, in arrival order within the group; a full group
 * never holds up another. With `maxConcurrency: 1` each caller's calls in the default group run
 * strictly one after another. Top-level `ObjectRef` arguments are fetched before the call runs;
 * a call waiting on its arguments holds back the calls behind it in its group, as in Ray. Errors
 * thrown by user code go back to the caller as `TaskError` with the actor id and method.
 *
 * Streaming calls (`stream.ts`) hold their group's slot until the generator ends. A cancelled
 * call that is queued never starts; a running one has its `AbortSignal` aborted.
 *
 * @module
 */
import { CallContext, enterCall, exitCall } from '../call-context.ts';
import { ObjectRef } from '../client/object-ref.ts';
import { InvalidArgumentError, isRuntimeError, toTaskError } from '../errors.ts';
import type { Call } from '../protocol.ts';
import type { Connection } from '../transport.ts';
import type { GroupThread } from './group-thread.ts';
import { type StreamState, driveStream } from './stream.ts';

interface Entry {
  msg: Call;
  group: Group;
  sink: Connection | undefined;
  argsReady: Promise<void> | undefined;
  argsError: unknown;
  cancelled: boolean;
  resolve(v: unknown): void;
  reject(e: unknown): void;
}

/** One concurrency group: its calls run at most `limit` at once, in arrival order. */
class Group {
  running = 0;
  queue: Entry[] = [];
  head = 0;
  constructor(
    readonly name: string,
    readonly limit: number,
    /** Set when the group runs on a thread of its own. */
    readonly thread?: GroupThread,
  ) {}
}

/** Finds the function a call names. */
export type MethodLookup = (method: string) => { fn: (...a: unknown[]) => unknown; self: unknown };

/** The name of the group calls run in when they name none. */
export const defaultGroupName = 'default';

/** Serialises (or bounds) calls into one actor, per concurrency group. */
export class Executor {
  private readonly groups = new Map<string, Group>();
  private readonly defaultGroup: Group;
  /** Streaming calls running, by call id, for the consumer's acks. */
  private readonly streams = new Map<string, StreamState>();
  /** While paused (fenced: the head may have replaced this incarnation) no call starts. */
  private paused = false;

  constructor(
    private readonly lookup: MethodLookup,
    maxConcurrency: number,
    private readonly actorId: string,
    concurrencyGroups: Readonly<Record<string, number>> = {},
    threads: readonly GroupThread[] = [],
  ) {
    this.defaultGroup = new Group(defaultGroupName, maxConcurrency);
    this.groups.set(defaultGroupName, this.defaultGroup);
    for (const [name, limit] of Object.entries(concurrencyGroups)) {
      const thread = threads.find((t) => t.group === name);
      if (name !== defaultGroupName) this.groups.set(name, new Group(name, limit, thread));
    }
  }

  /** Handles one call; returns the result, or a promise of it. `sink` carries stream items. */
  handle(msg: Call, sink?: Connection): unknown {
    const group = msg.group === undefined ? this.defaultGroup : this.groups.get(msg.group);
    if (!group) {
      throw new InvalidArgumentError(
        `actor ${this.actorId} has no concurrency group '${msg.group}' (it has ${[...this.groups.keys()].join(', ')})`,
        { context: { actorId: this.actorId, method: msg.method } },
      );
    }
    const args = msg.args;
    let refs = false;
    for (let i = 0; i < args.length; i++) {
      if (args[i] instanceof ObjectRef) {
        refs = true;
        break;
      }
    }
    if (!refs && !this.paused && group.running < group.limit && group.head === group.queue.length) {
      return this.run(group, msg, sink);
    }
    return new Promise((resolve, reject) => {
      const e: Entry = {
        msg,
        group,
        sink,
        argsReady: undefined,
        argsError: undefined,
        cancelled: false,
        resolve,
        reject,
      };
      if (refs) {
        e.argsReady = resolveArgs(args).then(
          () => {
            e.argsReady = undefined;
            this.pump(group);
          },
          (err) => {
            e.argsError = err;
            e.argsReady = undefined;
            this.pump(group);
          },
        );
      }
      if (sink) callsOf(sink).set(msg.rid, e);
      group.queue.push(e);
      this.pump(group);
    });
  }

  /**
   * The caller cancelled the call it sent on `conn` as request `rid`: a queued one never starts,
   * a running one is aborted. (A synchronous method is over before the cancel is read.)
   */
  cancel(conn: Connection, rid: number): void {
    const calls = conn.meta.calls as Map<number, Entry | CallContext> | undefined;
    const c = calls?.get(rid);
    if (!c) return;
    if (c instanceof CallContext) return c.cancel();
    calls!.delete(rid);
    c.cancelled = true;
    c.reject(new CallContext(c.msg.method, this.actorId).error());
  }

  /** The consumer of streaming call `callId` has taken `consumed` items. */
  ack(callId: string, consumed: number): void {
    this.streams.get(callId)?.ack(consumed);
  }

  /** Starts no call until `resume` (calls keep queueing in arrival order). */
  pause(): void {
    this.paused = true;
  }

  /** Starts the calls that queued while paused, in order. */
  resume(): void {
    this.paused = false;
    for (const g of this.groups.values()) this.pump(g);
  }

  private pump(g: Group): void {
    while (!this.paused && g.running < g.limit && g.head < g.queue.length) {
      const e = g.queue[g.head]!;
      if (e.cancelled) {
        g.queue[g.head++] = undefined as unknown as Entry;
        continue;
      }
      if (e.argsReady) return;
      g.queue[g.head++] = undefined as unknown as Entry;
      if (g.head > 1024 && g.head * 2 > g.queue.length) {
        g.queue = g.queue.slice(g.head);
        g.head = 0;
      }
      if (e.sink) callsOf(e.sink).delete(e.msg.rid);
      if (e.argsError !== undefined) {
        e.reject(e.argsError);
        continue;
      }
      try {
        const r = this.run(g, e.msg, e.sink);
        if (isThenable(r)) r.then(e.resolve, e.reject);
        else e.resolve(r);
      } catch (err) {
        e.reject(err);
      }
    }
  }

  private run(g: Group, msg: Call, sink: Connection | undefined): unknown {
    const method = msg.method;
    const { fn, self } = this.lookup(method);
    const ctx = new CallContext(method, this.actorId);
    g.running++;
    let r: unknown;
    if (g.thread) {
      try {
        r = this.onThread(g.thread, msg, ctx);
      } catch (e) {
        this.finish(g);
        throw this.wrap(e, method);
      }
    } else {
      // The method's synchronous part runs as the call (`callSignal()`); no closure, no map: this
      // is every call's path.
      const prev = enterCall(ctx);
      try {
        r = fn.apply(self, msg.args);
        if (msg.stream) r = this.stream(r, ctx, msg, sink);
      } catch (e) {
        this.finish(g);
        throw this.wrap(e, method);
      } finally {
        exitCall(prev);
      }
    }
    if (!isThenable(r)) {
      this.finish(g);
      return r;
    }
    // Still running: `cancel` finds it by its request id on the caller's connection.
    const calls = sink && callsOf(sink);
    calls?.set(msg.rid, ctx);
    return Promise.resolve(r).then(
      (v) => {
        calls?.delete(msg.rid);
        this.finish(g);
        return v;
      },
      (e) => {
        calls?.delete(msg.rid);
        this.finish(g);
        throw this.wrap(e, method);
      },
    );
  }

  /** Posts the call to its group's thread; a cancel reaches the thread's `callSignal()`. */
  private onThread(t: GroupThread, msg: Call, ctx: CallContext): Promise<unknown> {
    if (msg.stream) {
      throw new InvalidArgumentError(
        `'${msg.method}': streaming calls do not run in a thread group ('${t.group}')`,
        { context: { actorId: this.actorId, method: msg.method } },
      );
    }
    const { id, result } = t.call(msg.method, msg.args);
    ctx.onCancel = () => t.cancel(id);
    return result;
  }

  private stream(out: unknown, ctx: CallContext, msg: Call, sink: Connection | undefined) {
    if (!sink || msg.callId === undefined) {
      throw new InvalidArgumentError('a streaming call needs a connection and a call id');
    }
    return driveStream(out, {
      ctx,
      callId: msg.callId,
      sink,
      backpressure: msg.backpressure ?? 0,
      streams: this.streams,
      wrap: (e) => this.wrap(e, msg.method),
    });
  }

  private finish(g: Group): void {
    g.running--;
    if (g.head < g.queue.length) queueMicrotask(() => this.pump(g));
  }

  private wrap(e: unknown, method: string): unknown {
    // A runtime error from a nested call (the actor called a dead actor) passes through as it is.
    if (isRuntimeError(e)) return e;
    return toTaskError(e, { actorId: this.actorId, method });
  }
}

/** The calls from `conn` that can still be cancelled (queued, or running), by request id. */
function callsOf(conn: Connection): Map<number, Entry | CallContext> {
  return ((conn.meta.calls as Map<number, Entry | CallContext> | undefined) ??= new Map());
}

/** Fetches every top-level ref argument and puts the values in place. */
async function resolveArgs(args: unknown[]): Promise<void> {
  await Promise.all(
    args.map(async (a, i) => {
      if (a instanceof ObjectRef) args[i] = await a;
    }),
  );
}

/** True for a promise or any other thenable. */
export function isThenable(v: unknown): v is PromiseLike<unknown> {
  return (
    v !== null && typeof v === 'object' && typeof (v as { then?: unknown }).then === 'function'
  );
}
