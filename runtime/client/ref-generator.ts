/**
 * `ObjectRefGenerator<T>`: what a streaming call (`.options({ numReturns: 'streaming' })`)
 * returns, Ray's shape. `for await (const ref of gen)` gives one `ObjectRef<T>` per item the
 * remote generator yields, as soon as it arrives; `await ref` (or `get(ref)`) is the item. An
 * error the generator threw arrives as the ref of the item where it threw (it rejects), and ends
 * the stream; so does a call that failed as a whole (the actor died: `ActorDiedError`).
 *
 * Typing: TypeScript types the element of every `for await` as the awaited element, so in
 * `for await (const ref of gen)` it types `ref` as the item `T`, while at runtime it is the
 * `ObjectRef<T>`; `await ref` gives the item either way. Take refs with `gen.next()` to keep them
 * typed as refs (to pass them on, or to `wait` on them).
 *
 * @module
 */
import { holdProcessWhile } from '../transport.ts';
import type { ObjectRef } from './object-ref.ts';

/** The caller's side of one streaming call; created by `ActorClient`. */
export class ObjectRefGenerator<T = unknown> implements AsyncIterableIterator<ObjectRef<T>> {
  /** Items that arrived and were not taken yet, by index (large ones may arrive out of order). */
  private readonly arrived = new Map<number, ObjectRef<T>>();
  private index = 0;
  /** Items that arrived so far (taken or not). */
  private received = 0;
  /** Items the call produced in all, once its reply came. */
  private total: number | undefined;
  /** Why the call failed as a whole (given out once, as the next item). */
  private failure: { error: unknown } | undefined;
  private closed = false;
  private wake: (() => void) | undefined;
  /** @internal Tells the worker how many items were consumed (backpressure). */
  _ack: ((consumed: number) => void) | undefined;
  /** @internal Stops the call on the worker (the consumer left early). */
  _cancel: (() => void) | undefined;
  /** @internal The call behind the stream (for `cancel`). */
  _call: unknown;

  /** @internal */
  constructor(
    /** The call's id: what `cancel` and stream messages name. */
    readonly id: string,
    private readonly newRef: () => ObjectRef<T>,
  ) {}

  /** @internal Item `index` arrived: its value, or the error the generator threw there. */
  _item(index: number, value: unknown, error?: unknown): void {
    if (this.closed || index < this.index || this.arrived.has(index)) return;
    const ref = this.newRef();
    if (error !== undefined) ref._reject(error);
    else ref._resolve(value);
    this.arrived.set(index, ref);
    this.received++;
    this.notify();
  }

  /** @internal True once nothing more can arrive (every item did, or the consumer left). */
  get _complete(): boolean {
    return this.closed || (this.total !== undefined && this.received >= this.total);
  }

  /** @internal The call ended after `total` items. */
  _end(total: number): void {
    this.total = total;
    this.notify();
  }

  /** @internal The call failed as a whole (after the items that arrived). */
  _fail(error: unknown): void {
    if (this.total !== undefined) return;
    this.failure = { error };
    this.notify();
  }

  /** True once every item was taken (or the consumer stopped). */
  get done(): boolean {
    return this.closed || (this.total !== undefined && this.index >= this.total);
  }

  async next(): Promise<IteratorResult<ObjectRef<T>, undefined>> {
    for (;;) {
      const ref = this.arrived.get(this.index);
      if (ref) {
        this.arrived.delete(this.index);
        this.index++;
        this._ack?.(this.index);
        return { value: ref, done: false };
      }
      if (this.closed || (this.total !== undefined && this.index >= this.total)) {
        return { value: undefined, done: true };
      }
      if (this.failure && this.total === undefined) {
        // Items still on the way when the call failed are lost with it; this one says why.
        const failed = this.newRef();
        failed._reject(this.failure.error);
        this.failure = undefined;
        this.total = ++this.index;
        return { value: failed, done: false };
      }
      // A consumer waiting for an item keeps the process alive, as a pending call does.
      await holdProcessWhile(new Promise<void>((resolve) => (this.wake = resolve)));
    }
  }

  /** Stops consuming (a `break` out of `for await`): the remote generator is closed. */
  async return(): Promise<IteratorResult<ObjectRef<T>, undefined>> {
    if (!this.done) this._cancel?.();
    this.closed = true;
    this.arrived.clear();
    this.notify();
    return { value: undefined, done: true };
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  toString(): string {
    return `ObjectRefGenerator(${this.id})`;
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }
}
