/**
 * The context of the actor call or task running now, for user code: `callSignal()` is its
 * `AbortSignal`, aborted when the caller cancels the call (`cancel(ref)`). Kept in an
 * `AsyncLocalStorage`, so it follows the call across its awaits and concurrent calls of one
 * actor each see their own.
 *
 * @module
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { TaskCancelledError } from './errors.ts';

/** One running call, as the worker's executor tracks it. */
export class CallContext {
  private controller: AbortController | undefined;
  /** True once the caller cancelled the call. */
  cancelled = false;
  /** @internal Called on cancel (a streaming call waiting for its consumer wakes up). */
  onCancel: (() => void) | undefined;

  constructor(
    readonly callId: string,
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

// One store per process, even if this module is loaded twice (the worker's copy and the user's).
const key = Symbol.for('rtjob.callContext');
const g = globalThis as { [key]?: AsyncLocalStorage<CallContext> };
/** @internal */
export const callStorage: AsyncLocalStorage<CallContext> = (g[key] ??=
  new AsyncLocalStorage<CallContext>());

const never = new AbortController().signal;

/**
 * The `AbortSignal` of the actor call or task running now: aborted (with a
 * `TaskCancelledError` as its `reason`) when its caller cancels it with `cancel(ref)`. Outside a
 * call, a signal that never aborts.
 *
 * @example
 * async fetchAll(urls: string[]) {
 *   const signal = callSignal();
 *   for (const u of urls) await fetch(u, { signal });
 * }
 */
export function callSignal(): AbortSignal {
  return callStorage.getStore()?.signal ?? never;
}
