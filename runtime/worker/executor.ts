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
import { CallContext, runInCall } from '../call-context.ts';
import { ObjectRef } from '../client/object-ref.ts';
import { InvalidArgumentError, isRuntimeError, toTaskError } from '../errors.ts';
import type { Call } from '../protocol.ts';
import type { Connection } from '../transport.ts';
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
  /** Calls queued (not started), by call id, for `cancel`. */
  private readonly queued = new Map<string, Entry>();
  /** Calls running, by call id, for `cancel`. */
  private readonly running = new Map<string, CallContext>();
  /** Streaming calls running, by call id, for the consumer's acks. */
  private readonly streams = new Map<string, StreamState>();
  /** While paused (fenced: the head may have replaced this incarnation) no call starts. */
  private paused = false;

  constructor(
    private readonly lookup: MethodLookup,
    maxConcurrency: number,
    private readonly actorId: string,
    concurrencyGroups: Readonly<Record<string, number>> = {},
  ) {
    this.defaultGroup = new Group(defaultGroupName, maxConcurrency);
    this.groups.set(defaultGroupName, this.defaultGroup);
    for (const [name, limit] of Object.entries(concurrencyGroups)) {
      if (name !== defaultGroupName) this.groups.set(name, new Group(name, limit));
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
      if (msg.callId !== undefined) this.queued.set(msg.callId, e);
      group.queue.push(e);
      this.pump(group);
    });
  }

  /** The caller cancelled call `callId`: a queued one never starts, a running one is aborted. */
  cancel(callId: string): void {
    const q = this.queued.get(callId);
    if (q) {
      this.queued.delete(callId);
      q.cancelled = true;
      q.reject(new CallContext(callId, q.msg.method, this.actorId).error());
      return;
    }
    this.running.get(callId)?.cancel();
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
      if (e.msg.callId !== undefined) this.queued.delete(e.msg.callId);
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
    const callId = msg.callId;
    g.running++;
    let r: unknown;
    try {
      if (callId === undefined) {
        r = fn.apply(self, msg.args);
      } else {
        const ctx = new CallContext(callId, method, this.actorId);
        this.running.set(callId, ctx);
        r = runInCall(ctx, () => {
          const out = fn.apply(self, msg.args);
          if (!msg.stream) return out;
          if (!sink) throw new InvalidArgumentError('a streaming call needs a connection');
          return driveStream(out, {
            ctx,
            sink,
            backpressure: msg.backpressure ?? 0,
            streams: this.streams,
            wrap: (e) => this.wrap(e, method),
          });
        });
      }
    } catch (e) {
      this.finish(g, callId);
      throw this.wrap(e, method);
    }
    if (!isThenable(r)) {
      this.finish(g, callId);
      return r;
    }
    return Promise.resolve(r).then(
      (v) => {
        this.finish(g, callId);
        return v;
      },
      (e) => {
        this.finish(g, callId);
        throw this.wrap(e, method);
      },
    );
  }

  private finish(g: Group, callId: string | undefined): void {
    g.running--;
    if (callId !== undefined) this.running.delete(callId);
    if (g.head < g.queue.length) queueMicrotask(() => this.pump(g));
  }

  private wrap(e: unknown, method: string): unknown {
    // A runtime error from a nested call (the actor called a dead actor) passes through as it is.
    if (isRuntimeError(e)) return e;
    return toTaskError(e, { actorId: this.actorId, method });
  }
}

/** Fetches every top-level ref argument and puts the values in place. */
async function resolveArgs(args: unknown[]): Promise<void> {
  await Promise.all(
    args.map(async (a, i) => {
      if (a instanceof ObjectRef) args[i] = await a;
    }),
  );
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return (
    v !== null && typeof v === 'object' && typeof (v as { then?: unknown }).then === 'function'
  );
}
