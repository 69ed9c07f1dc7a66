/**
 * Typed actor handles and task functions. `defineActor<typeof C>(url, 'C')` gives a class whose
 * `.remote(...ctorArgs)` returns an `ActorHandle<C>`: every method `m` of `C` becomes
 * `handle.m.remote(...args): ObjectRef<Awaited<ReturnType<C['m']>>>`, with arguments checked
 * against the method (each may also be an `ObjectRef` of the right type). Non-methods are not on
 * the handle; a handle is not thenable. Out-of-band operations use exported symbols, so they
 * never clash with user method names.
 *
 * @module
 */
import type { ObjectRef } from './client/object-ref.ts';
import type { ObjectRefGenerator } from './client/ref-generator.ts';
import type { PlacementStrategy } from './protocol.ts';

/** Symbol under which a handle exposes its actor id: `handle[kActorId]`. */
export const kActorId: unique symbol = Symbol.for('rtjob.actorId');

/** A value, or a ref to one (top-level ref arguments are resolved before the call). */
export type RefOr<T> = T | ObjectRef<T>;
type RefArgs<A extends unknown[]> = { [I in keyof A]: RefOr<A[I]> };

/** Per-call options. */
export interface CallOptions {
  /** Re-run the call on a restarted actor this many times (-1: always). @default the actor's */
  maxTaskRetries?: number;
  /**
   * `'streaming'`: the method is a generator (`async function*` or `function*`) and `.remote()`
   * returns an `ObjectRefGenerator` of its items, each as soon as it is produced.
   * @default one return value
   */
  numReturns?: 'streaming';
  /**
   * Streaming: the generator pauses while this many items are produced and not yet taken by the
   * caller (Ray's `_generator_backpressure_num_objects`). @default 0 (no limit)
   */
  generatorBackpressure?: number;
  /** The actor's concurrency group this call runs in. @default the default group */
  concurrencyGroup?: string;
}

/** Options that make a call streaming. */
export type StreamingCallOptions = Omit<CallOptions, 'numReturns' | 'maxTaskRetries'> & {
  numReturns: 'streaming';
};

/** The item type of a generator method's result (`never` for a method that is not one). */
export type YieldOf<R> =
  // biome-ignore lint: any return and next types
  R extends AsyncGenerator<infer Y, any, any>
    ? Awaited<Y>
    : // biome-ignore lint: any return and next types
      R extends Generator<infer Y, any, any>
      ? Awaited<Y>
      : never;

/** What `options({ numReturns: 'streaming' })` gives for a method that is not a generator. */
export interface NotAGenerator {
  /** Not callable: only a generator method streams. */
  readonly remote: never;
}

/** One remote method of a handle. */
export interface RemoteMethod<A extends unknown[], R> {
  /** Calls the method; the ref settles with its (awaited) result. */
  remote(...args: RefArgs<A>): ObjectRef<Awaited<R>>;
  /** The method as a streaming call: `.remote()` gives an `ObjectRefGenerator` of its items. */
  options(
    o: StreamingCallOptions,
  ): [YieldOf<R>] extends [never] ? NotAGenerator : StreamingMethod<A, YieldOf<R>>;
  /** The same method with per-call options. */
  options(o: CallOptions): RemoteMethod<A, R>;
}

/** A generator method called as a stream. */
export interface StreamingMethod<A extends unknown[], Y> {
  /** Starts the generator; its items arrive on the returned generator as they are produced. */
  remote(...args: RefArgs<A>): ObjectRefGenerator<Y>;
  /** The same streaming method with more per-call options. */
  options(o: Omit<CallOptions, 'maxTaskRetries'>): StreamingMethod<A, Y>;
}

// biome-ignore lint: the any in the constraint is what lets every function type match
type AnyFn = (...a: any[]) => any;
type MethodKeys<T> = {
  [K in keyof T]: K extends 'then' | 'constructor' ? never : T[K] extends AnyFn ? K : never;
}[keyof T] &
  string;

/** A typed reference to a live actor. */
export type ActorHandle<T> = {
  readonly [K in MethodKeys<T>]: T[K] extends (...a: infer A) => infer R
    ? RemoteMethod<A, R>
    : never;
} & { readonly [kActorId]: string };

// biome-ignore lint: abstract constructor of any arguments
export type ActorConstructor = abstract new (...a: any[]) => object;

/** Placement-group reference usable in actor options. */
export interface PlacementGroupRef {
  readonly id: string;
}

/** Options for creating an actor (Ray's names, camel-cased). */
export interface ActorOptions {
  /** Logical CPUs reserved while the actor lives. @default 0 */
  numCpus?: number;
  /** GPUs (fractions below 1 share one device). @default 0 */
  numGpus?: number;
  /** Memory to reserve, in bytes. @default 0 */
  memoryBytes?: number;
  /** Custom resources, e.g. `{ accelerator: 1 }`. @default {} */
  resources?: Record<string, number>;
  /** Registers the actor under a name for `getActor(name)`. */
  name?: string;
  /** `'detached'` actors outlive the driver that created them. @default owned by the creator */
  lifetime?: 'detached';
  /** Restarts after the process dies (-1: unlimited). @default 0 */
  maxRestarts?: number;
  /** Re-runs of calls in flight when the process died (-1: unlimited). @default 0 */
  maxTaskRetries?: number;
  /**
   * Calls of the default concurrency group that run at once; 1 keeps each caller's calls
   * strictly in order. @default 1
   */
  maxConcurrency?: number;
  /**
   * More concurrency groups, each with its own limit, e.g. `{ io: 4, compute: 1 }`; a call picks
   * one with `.options({ concurrencyGroup: 'io' })`. A full group never holds up another. Groups
   * given as a number share the worker's event loop: a method that computes without awaiting
   * holds them all up. A group given as `{ maxConcurrency, thread: true }` runs its calls on a
   * thread of its own, with its own instance of the class (see the runtime README). @default {}
   */
  concurrencyGroups?: Record<string, number | ConcurrencyGroupOptions>;
  /** Reserve from this placement group. */
  placementGroup?: PlacementGroupRef;
  /** Bundle of `placementGroup`; -1 is any. @default -1 */
  bundleIndex?: number;
  /** `DEFAULT` packs, `SPREAD` spreads, or pin to a node. @default 'DEFAULT' */
  schedulingStrategy?: 'DEFAULT' | 'SPREAD' | { nodeId: string; soft?: boolean };
  /** Extra environment variables for the actor's process. @default {} */
  env?: Record<string, string>;
}

/** A defined actor class: configure with `options`, create with `remote`. */
export interface ActorClass<C extends ActorConstructor> {
  options(o: ActorOptions): ActorClass<C>;
  remote(...args: RefArgs<ConstructorParameters<C>>): ActorHandle<InstanceType<C>>;
}

/** A concurrency group given in full (`ActorOptions.concurrencyGroups`). */
export interface ConcurrencyGroupOptions {
  /** Calls of the group that run at once. @default 1 */
  maxConcurrency?: number;
  /**
   * Run the group's calls on a worker thread of their own, so a method that computes for
   * seconds without awaiting holds up no other group (Ray runs each group on its own thread).
   * The thread has its own instance of the actor class, built from the same constructor
   * arguments: the group's methods share state with each other, not with the other groups.
   * @default false
   */
  thread?: boolean;
}

/** Options for one task call. */
export interface TaskOptions {
  /** Re-runs when the worker running it dies. @default 3 (0 for a streaming task) */
  maxRetries?: number;
  /** `'streaming'`: the task is a generator; see `CallOptions.numReturns`. */
  numReturns?: 'streaming';
  /** Streaming: see `CallOptions.generatorBackpressure`. @default 0 (no limit) */
  generatorBackpressure?: number;
}

/** A defined task function. */
export interface TaskFunction<F extends AnyFn> {
  remote(...args: RefArgs<Parameters<F>>): ObjectRef<Awaited<ReturnType<F>>>;
  /** The task as a streaming call: `.remote()` gives an `ObjectRefGenerator` of its items. */
  options(
    o: Omit<TaskOptions, 'numReturns' | 'maxRetries'> & { numReturns: 'streaming' },
  ): [YieldOf<ReturnType<F>>] extends [never]
    ? NotAGenerator
    : StreamingTask<Parameters<F>, YieldOf<ReturnType<F>>>;
  options(o: TaskOptions): TaskFunction<F>;
}

/** A generator task called as a stream. */
export interface StreamingTask<A extends unknown[], Y> {
  remote(...args: RefArgs<A>): ObjectRefGenerator<Y>;
}

/** Options for `placementGroup`. */
export interface PlacementGroupOptions {
  /** @default 'PACK' */
  strategy?: PlacementStrategy;
  name?: string;
  lifetime?: 'detached';
}

/** @internal Symbol under which a handle exposes its `ActorHandleCore`. */
export const kCore: unique symbol = Symbol.for('rtjob.handleCore');

/** @internal The object behind every handle proxy; the codec recognises it. */
export class ActorHandleCore {
  constructor(
    readonly actorId: string,
    readonly maxTaskRetries: number,
  ) {}
}

/** @internal Builds the proxy for a handle; `call` does the actual remote call. */
export function makeHandle<T>(
  core: ActorHandleCore,
  call: (
    method: string,
    args: unknown[],
    opts: CallOptions | undefined,
  ) => ObjectRef<unknown> | ObjectRefGenerator<unknown>,
): ActorHandle<T> {
  const methods = new Map<string, unknown>();
  const method = (name: string, opts?: CallOptions) => ({
    remote: (...args: unknown[]) => call(name, args, opts),
    options: (o: CallOptions) => method(name, { ...opts, ...o }),
  });
  return new Proxy(core, {
    get(target, prop) {
      if (prop === kActorId) return target.actorId;
      if (prop === kCore) return target;
      if (typeof prop === 'symbol') return undefined;
      if (prop === 'then' || prop === 'toJSON') return undefined;
      let m = methods.get(prop);
      if (!m) {
        m = method(prop);
        methods.set(prop, m);
      }
      return m;
    },
    set() {
      return false;
    },
    has(_t, prop) {
      return prop === kActorId;
    },
  }) as unknown as ActorHandle<T>;
}
