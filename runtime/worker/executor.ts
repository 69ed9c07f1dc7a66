/**
 * Runs calls against the hosted actor (or task functions): at most `maxConcurrency` at once, in
 * arrival order. With `maxConcurrency: 1` each caller's calls run strictly one after another.
 * Top-level `ObjectRef` arguments are fetched before the call runs; a call waiting on its
 * arguments holds back the calls behind it, as in Ray. Errors thrown by user code go back to the
 * caller as `TaskError` with the actor id and method.
 *
 * @module
 */
import { isRuntimeError, toTaskError } from '../errors.ts';
import { ObjectRef } from '../client/object-ref.ts';
import type { Call } from '../protocol.ts';

interface Entry {
  method: string;
  args: unknown[];
  argsReady: Promise<void> | undefined;
  argsError: unknown;
  resolve(v: unknown): void;
  reject(e: unknown): void;
}

/** Finds the function a call names. */
export type MethodLookup = (method: string) => { fn: (...a: unknown[]) => unknown; self: unknown };

/** Serialises (or bounds) calls into one actor. */
export class Executor {
  private running = 0;
  private queue: Entry[] = [];
  private head = 0;
  /** While paused (fenced: the head may have replaced this incarnation) no call starts. */
  private paused = false;

  constructor(
    private readonly lookup: MethodLookup,
    private readonly maxConcurrency: number,
    private readonly actorId: string,
  ) {}

  /** Handles one call; returns the result, or a promise of it. */
  handle(msg: Call): unknown {
    const args = msg.args;
    let refs = false;
    for (let i = 0; i < args.length; i++) {
      if (args[i] instanceof ObjectRef) {
        refs = true;
        break;
      }
    }
    if (!refs && !this.paused && this.running < this.maxConcurrency && this.head === this.queue.length) {
      return this.run(msg.method, args);
    }
    return new Promise((resolve, reject) => {
      const e: Entry = { method: msg.method, args, argsReady: undefined, argsError: undefined, resolve, reject };
      if (refs) {
        e.argsReady = resolveArgs(args).then(
          () => {
            e.argsReady = undefined;
            this.pump();
          },
          (err) => {
            e.argsError = err;
            e.argsReady = undefined;
            this.pump();
          },
        );
      }
      this.queue.push(e);
      this.pump();
    });
  }

  /** Starts no call until `resume` (calls keep queueing in arrival order). */
  pause(): void {
    this.paused = true;
  }

  /** Starts the calls that queued while paused, in order. */
  resume(): void {
    this.paused = false;
    this.pump();
  }

  private pump(): void {
    while (!this.paused && this.running < this.maxConcurrency && this.head < this.queue.length) {
      const e = this.queue[this.head]!;
      if (e.argsReady) return;
      this.queue[this.head++] = undefined as unknown as Entry;
      if (this.head > 1024 && this.head * 2 > this.queue.length) {
        this.queue = this.queue.slice(this.head);
        this.head = 0;
      }
      if (e.argsError !== undefined) {
        e.reject(e.argsError);
        continue;
      }
      try {
        const r = this.run(e.method, e.args);
        if (isThenable(r)) r.then(e.resolve, e.reject);
        else e.resolve(r);
      } catch (err) {
        e.reject(err);
      }
    }
  }

  private run(method: string, args: unknown[]): unknown {
    const { fn, self } = this.lookup(method);
    this.running++;
    let r: unknown;
    try {
      r = fn.apply(self, args);
    } catch (e) {
      this.finish();
      throw this.wrap(e, method);
    }
    if (!isThenable(r)) {
      this.finish();
      return r;
    }
    return Promise.resolve(r).then(
      (v) => {
        this.finish();
        return v;
      },
      (e) => {
        this.finish();
        throw this.wrap(e, method);
      },
    );
  }

  private finish(): void {
    this.running--;
    if (this.head < this.queue.length) queueMicrotask(() => this.pump());
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
  return v !== null && typeof v === 'object' && typeof (v as { then?: unknown }).then === 'function';
}
