/**
 * `ObjectRef<T>`: a reference to a value that lives in its owner process (the process that called
 * `put` or made the call that produces it). Awaitable (`await ref`), passable to other actors and
 * tasks, and fetched from its owner on first `get` in any other process.
 *
 * @module
 */

declare const valueType: unique symbol;

/** Fetches a ref's value from its owner; installed by the runtime. */
export type RefFetcher = (ref: ObjectRef<unknown>) => Promise<unknown>;
let fetcher: RefFetcher = () => Promise.reject(new Error('rtjob: no runtime to fetch objects'));

/** @internal Sets how remote refs are fetched. */
export function setRefFetcher(f: RefFetcher): void {
  fetcher = f;
}

const PENDING = 0;
const OK = 1;
const FAILED = 2;
const REMOTE = 3;
/** Owned, its value spilled to disk by the object store: `_loader` brings it back. */
const SPILLED = 4;

/**
 * A reference to a value owned by some process. Use `await ref` or `get(ref)`.
 *
 * @example
 * const ref: ObjectRef<number> = counter.incr.remote(1);
 * const n = await ref;
 */
export class ObjectRef<T = unknown> implements PromiseLike<T> {
  declare readonly [valueType]?: T;
  /** Unique id; stable across processes. */
  readonly id: string;
  /** `host:port` of the owner's object server. */
  readonly owner: string;
  /** @internal */ _state: number;
  /** @internal */ _value: unknown;
  /** @internal */ _waiters: ((ref: never) => void)[] | undefined;
  /** @internal */ _fetching: Promise<unknown> | undefined;
  /** @internal */ _released = false;
  /** @internal The unanswered call that produces this ref (for `cancel`); cleared once settled. */
  _call: unknown;
  /** @internal Restores a spilled value (set by the object store while the ref is spilled). */
  _loader: (() => Promise<unknown>) | undefined;

  /** @internal */
  constructor(id: string, owner: string, remote = false) {
    this.id = id;
    this.owner = owner;
    this._state = remote ? REMOTE : PENDING;
    this._value = undefined;
    this._waiters = undefined;
    this._fetching = undefined;
    this._call = undefined;
    this._loader = undefined;
  }

  /** @internal A ref that already holds its value. */
  static resolved<T>(id: string, owner: string, value: T): ObjectRef<T> {
    const r = new ObjectRef<T>(id, owner);
    r._state = OK;
    r._value = value;
    return r;
  }

  /** True once the value (or the error) is here. */
  get isSettled(): boolean {
    return this._state === OK || this._state === FAILED;
  }

  /** @internal */
  _resolve(v: unknown): void {
    if (this._state === OK || this._state === FAILED) return;
    this._state = OK;
    this._value = v;
    this._call = undefined;
    this.wake();
  }

  /**
   * @internal Drops the value, which the object store wrote to disk: the next wait for it calls
   * `loader`. A ref without its value (pending, failed, spilled already) is left as it is.
   */
  _spill(loader: () => Promise<unknown>, fresh = false): void {
    // `fresh`: a ref just made for a spilled object (nothing waits on it yet).
    if (this._state !== OK && !(fresh && this._state === PENDING && !this._waiters)) return;
    this._state = SPILLED;
    this._value = undefined;
    this._fetching = undefined;
    this._loader = loader;
  }

  /** @internal True while the value is on disk (spilled by the object store). */
  get _spilled(): boolean {
    return this._state === SPILLED;
  }

  /** @internal */
  _reject(e: unknown): void {
    if (this._state === OK || this._state === FAILED) return;
    this._state = FAILED;
    this._value = e;
    this._call = undefined;
    this.wake();
  }

  /** @internal Calls `fn` once settled (fetching a remote value if needed). */
  _onSettled(fn: (ref: ObjectRef<T>) => void): void {
    // (waiters are stored untyped so ObjectRef<T> stays assignable to ObjectRef<unknown>)
    if (this._state === OK || this._state === FAILED) {
      fn(this);
      return;
    }
    (this._waiters ??= []).push(fn);
    if ((this._state === REMOTE || this._state === SPILLED) && !this._fetching) {
      const load =
        this._state === SPILLED ? this._loader! : () => fetcher(this as ObjectRef<unknown>);
      this._fetching = load().then(
        (v) => this._resolve(v),
        (e) => this._reject(e),
      );
    }
  }

  /** @internal The value, or throws the error; only once settled. */
  _take(): T {
    if (this._state === FAILED) throw this._value;
    return this._value as T;
  }

  then<R1 = T, R2 = never>(
    onfulfilled?: ((value: T) => R1 | PromiseLike<R1>) | null,
    onrejected?: ((reason: unknown) => R2 | PromiseLike<R2>) | null,
  ): Promise<R1 | R2> {
    if (this._state === OK) return Promise.resolve(this._value as T).then(onfulfilled, onrejected);
    return new Promise<T>((resolve, reject) =>
      this._onSettled((r) => (r._state === OK ? resolve(r._value as T) : reject(r._value))),
    ).then(onfulfilled, onrejected);
  }

  /** Like `Promise.prototype.catch`. */
  catch<R = never>(onrejected?: ((reason: unknown) => R | PromiseLike<R>) | null): Promise<T | R> {
    return this.then(undefined, onrejected);
  }

  /** Like `Promise.prototype.finally`. */
  finally(onfinally?: (() => void) | null): Promise<T> {
    return this.then().finally(onfinally);
  }

  toString(): string {
    return `ObjectRef(${this.id})`;
  }

  private wake(): void {
    const w = this._waiters;
    if (!w) return;
    this._waiters = undefined;
    for (const fn of w) (fn as (ref: ObjectRef<T>) => void)(this);
  }
}

/** True for object refs (by structure too, for refs from another copy of this module). */
export function isObjectRef(v: unknown): v is ObjectRef<unknown> {
  return v instanceof ObjectRef;
}
