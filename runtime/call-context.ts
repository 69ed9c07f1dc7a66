/**
 * The context of the actor call or task running now, for user code: `callSignal()` is its
 * `AbortSignal`, aborted when the caller cancels the call (`cancel(ref)`). The running call is
 * known while the method's synchronous part runs (up to its first `await`), and again in each
 * step of a generator method: read `callSignal()` there and keep the signal. (Not an
 * `AsyncLocalStorage`: on Node 20 one in use slows every promise of the process 2–3x.)
 *
 * @module
 */
import { TaskCancelledError } from './errors.ts';

/** One running call, as the worker's executor tracks it. */
export class CallContext {
  private controller: AbortController | undefined;
  /** True once the caller cancelled the call. */
  cancelled = false;
  /** @internal Called on cancel (a streaming call waiting for its consumer wakes up). */
  onCancel: (() => void) | undefined;

  constructor(
    readonly method: string,
    readonly actorId: string,
  ) {}

  /** Aborted when the call is cancelled (created on first use). */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.cancelled) this.controller.abort(this.error());
    }
    return this.controller.signal;
  }

  /** The caller cancelled the call. */
  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.controller?.abort(this.error());
    this.onCancel?.();
  }

  /** The error a cancelled call ends with. */
  error(): TaskCancelledError {
    return new TaskCancelledError(`call '${this.method}' of actor ${this.actorId} was cancelled`, {
      context: { actorId: this.actorId, method: this.method },
    });
  }
}

// One slot per process, even if this module is loaded twice (the worker's copy and the user's).
const key = Symbol.for('rtjob.callContext');
const g = globalThis as { [key]?: { current: CallContext | undefined } };
const slot = (g[key] ??= { current: undefined });

/**
 * @internal Makes `ctx` the running call (a method's synchronous part runs now); returns the one
 * to restore with `exitCall` when it returns.
 */
export function enterCall(ctx: CallContext): CallContext | undefined {
  const prev = slot.current;
  slot.current = ctx;
  return prev;
}

/** @internal Restores the running call `enterCall` returned. */
export function exitCall(prev: CallContext | undefined): void {
  slot.current = prev;
}

/** @internal Runs `fn` (a method's synchronous part, or one generator step) as call `ctx`. */
export function runInCall<T>(ctx: CallContext, fn: () => T): T {
  const prev = enterCall(ctx);
  try {
    return fn();
  } finally {
    exitCall(prev);
  }
}

const never = new AbortController().signal;

/**
 * The `AbortSignal` of the actor call or task running now: aborted (with a
 * `TaskCancelledError` as its `reason`) when its caller cancels it with `cancel(ref)`. Call it
 * before the method's first `await` (or in a generator method's body) and keep the signal;
 * elsewhere it is a signal that never aborts.
 *
 * @example
 * async fetchAll(urls: string[]) {
 *   const signal = callSignal(); // before the first await
 *   for (const u of urls) await fetch(u, { signal });
 * }
 */
export function callSignal(): AbortSignal {
  return slot.current?.signal ?? never;
}
