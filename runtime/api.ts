/**
 * The public API of the runtime: the door to everything else.
 *
 * @example
 * import { init, defineActor, get, shutdown } from 'rtjob';
 * import type { Counter } from './counter.ts';
 *
 * await init();
 * const CounterActor = defineActor<typeof Counter>(new URL('./counter.ts', import.meta.url), 'Counter');
 * const c = CounterActor.options({ name: 'c', maxRestarts: 2 }).remote(10);
 * console.log(await c.incr.remote(1)); // 11
 * await shutdown();
 *
 * @module
 */
import { isAbsolute, resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
import { installCodec } from './client/codec.ts';
import { type ClusterFile, readClusterFile } from './cluster-file.ts';
import { concurrencyGroupsWire } from './concurrency-groups.ts';
import { readEnv } from './env.ts';
import { pidAlive } from './pid.ts';
import { ActorClient, callWithOptions } from './client/actor-client.ts';
import { ObjectRef } from './client/object-ref.ts';
import { ObjectRefGenerator } from './client/ref-generator.ts';
import { Runtime, currentRuntime } from './client/runtime.ts';
import { GetTimeoutError, InvalidArgumentError, NotInitializedError } from './errors.ts';
import {
  type ActorClass,
  type ActorConstructor,
  type ActorHandle,
  ActorHandleCore,
  type ActorOptions,
  type PlacementGroupOptions,
  type TaskFunction,
  type TaskOptions,
  kActorId,
  makeHandle,
} from './handles.ts';
import { startLocalCluster } from './launch.ts';
import type { LocalClusterOptions } from './local-cluster.ts';
import {
  type ActorInfo,
  type ActorOptionsWire,
  type ActorSpecWire,
  type NodeInfo,
  type ObjectStoreStats,
  type ResourceMap,
  pack,
} from './protocol.ts';

installCodec();

/** Options for `init`. */
export interface InitOptions {
  /**
   * Head `host:port`, or `'local'` to always start an in-process cluster (as Ray's
   * `address='local'`). @default RTJOB_ADDRESS, then ~/.rtjob/cluster.json, else a local cluster
   */
  address?: string;
  /** Cluster token. @default RTJOB_TOKEN, then ~/.rtjob/cluster.json */
  token?: string;
  /** Job this driver belongs to. @default RTJOB_JOB_ID */
  jobId?: string;
  /** Environment given to every actor this driver creates. @default RTJOB_JOB_ENV (JSON) or {} */
  env?: Record<string, string>;
  /** Settings for the in-process cluster when one is started. */
  local?: LocalClusterOptions;
  /** Worker processes that run `defineTask` functions. @default 2 */
  taskPoolSize?: number;
  /** How long an object stays after being sent to another process. @default 30000 */
  objectTransferHoldMs?: number;
  /** Memory for objects before they spill to disk. @default RTJOB_OBJECT_STORE_MEMORY, else 30% of RAM */
  objectStoreMemoryBytes?: number;
  /**
   * How long to keep reconnecting to a head that went away (a restart on the same session): the
   * driver resumes its client id and keeps its actors; calls that need the head wait meanwhile.
   * 0 gives up at once (its actors are then killed as `owner-died`).
   * @default RTJOB_HEAD_RECONNECT_MS, else 60000
   */
  headReconnectMs?: number;
}

/** What `init` connected to. */
export interface ClusterInfo {
  readonly address: string;
  readonly token: string;
  /** True when `init` started the cluster in this process (it stops at `shutdown`). */
  readonly local: boolean;
  readonly sessionDir?: string;
}

interface DriverState {
  rt: Runtime;
  info: ClusterInfo;
  env: Record<string, string>;
  taskPoolSize: number;
  taskPool: ActorHandle<Record<string, never>>[];
  taskNext: number;
}
let driver: DriverState | undefined;
let initializing: Promise<ClusterInfo> | undefined;

/**
 * Connects this process to a cluster: `address`/`RTJOB_ADDRESS`, the cluster file, or a new
 * in-process cluster (head + one node agent). Inside an actor it returns the worker's runtime.
 */
export function init(opts: InitOptions = {}): Promise<ClusterInfo> {
  if (driver) return Promise.resolve(driver.info);
  return (initializing ??= doInit(opts).finally(() => (initializing = undefined)));
}

async function doInit(opts: InitOptions): Promise<ClusterInfo> {
  const existing = currentRuntime();
  const jobEnv = opts.env ?? readEnv('RTJOB_JOB_ENV') ?? {};
  if (existing) {
    const info = {
      address: existing.opts.headAddress,
      token: existing.opts.token,
      local: false,
      sessionDir: existing.sessionDir,
    };
    driver = {
      rt: existing,
      info,
      env: jobEnv,
      taskPoolSize: opts.taskPoolSize ?? 2,
      taskPool: [],
      taskNext: 0,
    };
    return info;
  }
  const forceLocal = opts.address === 'local';
  const envAddress = readEnv('RTJOB_ADDRESS');
  const file = forceLocal || opts.address || envAddress ? undefined : liveHead(readClusterFile());
  let address = forceLocal ? undefined : (opts.address ?? envAddress ?? file?.address);
  let token = forceLocal ? undefined : (opts.token ?? readEnv('RTJOB_TOKEN') ?? file?.token);
  let closeCluster: (() => Promise<void>) | undefined;
  let sessionDir: string | undefined;
  if (!address) {
    // The in-process cluster lives as long as the driver, which may end without `shutdown()`.
    const local = opts.local ?? {};
    const cluster = await startLocalCluster({
      ...local,
      head: { ...local.head, holdProcess: false },
      node: { ...local.node, holdProcess: false },
    });
    address = cluster.address;
    token = cluster.token;
    sessionDir = cluster.sessionDir;
    closeCluster = () => cluster.close();
  } else if (!token) {
    throw new InvalidArgumentError(
      `no token for cluster ${address}: pass token or set RTJOB_TOKEN`,
    );
  }
  const rt = await Runtime.start({
    headAddress: address,
    token: token!,
    kind: 'driver',
    jobId: opts.jobId ?? readEnv('RTJOB_JOB_ID'),
    objectTransferHoldMs: opts.objectTransferHoldMs,
    objectStoreMemoryBytes: opts.objectStoreMemoryBytes,
    // A driver reconnects to a head that restarts, and keeps its actors across it.
    reconnectMs: opts.headReconnectMs ?? readEnv('RTJOB_HEAD_RECONNECT_MS'),
  }).catch(async (e) => {
    await closeCluster?.();
    throw e;
  });
  if (closeCluster) rt.onClose(closeCluster);
  const info: ClusterInfo = {
    address,
    token: token!,
    local: closeCluster !== undefined,
    sessionDir: sessionDir ?? rt.sessionDir,
  };
  driver = {
    rt,
    info,
    env: jobEnv,
    taskPoolSize: opts.taskPoolSize ?? 2,
    taskPool: [],
    taskNext: 0,
  };
  return info;
}

/** The file unless the head it records has died (a joined node's file names no head pid). */
function liveHead(file: ClusterFile | undefined): ClusterFile | undefined {
  return file && (file.headPid === undefined || pidAlive(file.headPid)) ? file : undefined;
}

/** Disconnects; stops the in-process cluster if `init` started one. */
export async function shutdown(): Promise<void> {
  const d = driver;
  driver = undefined;
  if (d && d.rt.opts.kind === 'driver') await d.rt.close();
}

function state(): DriverState {
  if (!driver) {
    // Inside a worker the runtime exists before user code runs; adopt it without an await.
    const rt = currentRuntime();
    if (!rt) throw new NotInitializedError();
    driver = {
      rt,
      info: {
        address: rt.opts.headAddress,
        token: rt.opts.token,
        local: false,
        sessionDir: rt.sessionDir,
      },
      // The worker sets RTJOB_JOB_ENV from its assignment, so nested actors get the job's env.
      env: readEnv('RTJOB_JOB_ENV') ?? {},
      taskPoolSize: 2,
      taskPool: [],
      taskNext: 0,
    };
  }
  return driver;
}

function moduleUrl(module: string | URL): string {
  if (module instanceof URL) return module.href;
  if (/^[a-z][a-z0-9+.-]*:/i.test(module) && !/^[a-z]:[\\/]/i.test(module)) return module;
  return pathToFileURL(isAbsolute(module) ? module : resolvePath(module)).href;
}

function resolveOptions(
  o: ActorOptions,
  env: Record<string, string>,
  jobId?: string,
): ActorOptionsWire {
  const gpus = o.numGpus ?? 0;
  if (gpus > 1 && !Number.isInteger(gpus)) {
    throw new InvalidArgumentError(`numGpus ${gpus}: above 1 it must be a whole number`);
  }
  for (const [k, v] of Object.entries({
    numCpus: o.numCpus,
    numGpus: o.numGpus,
    memoryBytes: o.memoryBytes,
  })) {
    if (v !== undefined && (!(v >= 0) || !Number.isFinite(v)))
      throw new InvalidArgumentError(`${k} must be a number ≥ 0`);
  }
  const resources: ResourceMap = {};
  if (o.numCpus) resources.CPU = o.numCpus;
  if (gpus) resources.GPU = gpus;
  if (o.memoryBytes) resources.memory = o.memoryBytes;
  for (const [k, v] of Object.entries(o.resources ?? {})) if (v) resources[k] = v;
  const maxConcurrency = o.maxConcurrency ?? 1;
  if (!Number.isInteger(maxConcurrency) || maxConcurrency < 1) {
    throw new InvalidArgumentError('maxConcurrency must be a whole number ≥ 1');
  }
  const s = o.schedulingStrategy ?? 'DEFAULT';
  return {
    name: o.name,
    resources,
    detached: o.lifetime === 'detached',
    maxRestarts: o.maxRestarts ?? 0,
    maxTaskRetries: o.maxTaskRetries ?? 0,
    maxConcurrency,
    ...concurrencyGroupsWire(o.concurrencyGroups),
    placementGroupId: o.placementGroup?.id,
    bundleIndex: o.bundleIndex ?? -1,
    schedulingStrategy:
      typeof s === 'string' ? s : { type: 'node', nodeId: s.nodeId, soft: s.soft ?? false },
    env: { ...env, ...o.env },
    jobId,
  };
}

function createActor(spec: ActorSpecWire, o: ActorOptions, args: unknown[]): ActorHandle<unknown> {
  const d = state();
  // A worker's runtime has no job id of its own; it runs for the job of its actor (RTJOB_JOB_ID).
  const options = resolveOptions(o, d.env, d.rt.jobId ?? readEnv('RTJOB_JOB_ID'));
  const actorId = `actor_${d.rt.newId()}`;
  const ctorArgs = pack(args);
  const created = d.rt.headOnce({ type: 'createActor', actorId, spec, options, ctorArgs });
  created.catch(() => {}); // surfaced by the first call or actorReady()
  const client = d.rt.actor(actorId, created, options.maxTaskRetries);
  return makeHandle(new ActorHandleCore(actorId, options.maxTaskRetries), (m, a, co) =>
    callWithOptions(client, m, a, co),
  );
}

/**
 * Defines an actor class from a module and export name. The module is loaded only in the
 * worker; import the class with `import type` on the driver.
 *
 * @example
 * const Counter = defineActor<typeof import('./counter.ts').Counter>(new URL('./counter.ts', import.meta.url), 'Counter');
 */
export function defineActor<C extends ActorConstructor>(
  module: string | URL,
  exportName: string,
): ActorClass<C> {
  const spec: ActorSpecWire = { moduleUrl: moduleUrl(module), exportName, kind: 'actor' };
  const make = (opts: ActorOptions): ActorClass<C> => ({
    options: (o) => make({ ...opts, ...o }),
    remote: ((...args: unknown[]) => createActor(spec, opts, args)) as ActorClass<C>['remote'],
  });
  return make({});
}

/**
 * Defines a remote task: an exported (async) function run in the task worker pool.
 *
 * @example
 * const square = defineTask<typeof import('./math.ts').square>(new URL('./math.ts', import.meta.url), 'square');
 * await square.remote(4); // 16
 */
// biome-ignore lint: any function type
export function defineTask<F extends (...a: any[]) => any>(
  module: string | URL,
  exportName: string,
): TaskFunction<F> {
  const method = `${moduleUrl(module)}#${exportName}`;
  const make = (opts: TaskOptions): TaskFunction<F> => ({
    options: ((o: TaskOptions) => make({ ...opts, ...o })) as TaskFunction<F>['options'],
    remote: ((...args: unknown[]) => {
      const d = state();
      if (d.taskPool.length === 0) {
        for (let i = 0; i < d.taskPoolSize; i++) {
          d.taskPool.push(
            createActor(
              { moduleUrl: '', exportName: '', kind: 'tasks' },
              { maxConcurrency: 64, maxRestarts: -1 },
              [],
            ) as ActorHandle<Record<string, never>>,
          );
        }
      }
      const h = d.taskPool[d.taskNext++ % d.taskPool.length]!;
      const client = d.rt.actor(h[kActorId]);
      if (opts.numReturns === 'streaming')
        return client.stream(method, args, { backpressure: opts.generatorBackpressure ?? 0 });
      return client.call(method, args, opts.maxRetries ?? 3);
    }) as TaskFunction<F>['remote'],
  });
  return make({});
}

type Values<T extends readonly ObjectRef<unknown>[]> = {
  -readonly [K in keyof T]: T[K] extends ObjectRef<infer V> ? V : never;
};

/** Options for `get`. */
export interface GetOptions {
  /** Fail with `GetTimeoutError` after this long. @default no limit */
  timeoutMs?: number;
}

/** Waits for one ref's value, or for every value of a list of refs. */
export function get<T>(ref: ObjectRef<T>, opts?: GetOptions): Promise<T>;
export function get<const T extends readonly ObjectRef<unknown>[]>(
  refs: T,
  opts?: GetOptions,
): Promise<Values<T>>;
export function get(
  refs: ObjectRef<unknown> | readonly ObjectRef<unknown>[],
  opts: GetOptions = {},
): Promise<unknown> {
  const all = Array.isArray(refs)
    ? Promise.all(refs as ObjectRef<unknown>[])
    : valueOf(refs as ObjectRef<unknown>);
  if (opts.timeoutMs === undefined) return all;
  return new Promise((resolve, reject) => {
    const t = setTimeout(
      () => reject(new GetTimeoutError(`get timed out after ${opts.timeoutMs} ms`)),
      opts.timeoutMs,
    );
    all.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

/**
 * One ref's value as a single promise (the sync call path: `Promise.resolve(ref)` would add a
 * thenable job and two more promises per call).
 */
function valueOf(ref: ObjectRef<unknown>): Promise<unknown> {
  if (!(ref instanceof ObjectRef)) return Promise.resolve(ref);
  return new Promise((resolve, reject) =>
    ref._onSettled((r) => {
      try {
        resolve(r._take());
      } catch (e) {
        reject(e);
      }
    }),
  );
}

/** Stores a value in this process (its owner) and returns a ref other processes can fetch. */
export function put<T>(value: T): ObjectRef<T> {
  const rt = state().rt;
  return rt.objects.put(`obj_${rt.newId()}`, value);
}

/** Options for `wait`. */
export interface WaitOptions {
  /** How many refs to wait for. @default 1 */
  numReturns?: number;
  /** Return what is ready after this long. @default no limit */
  timeoutMs?: number;
}

/**
 * Waits until `numReturns` refs are settled (with a value or an error) or the timeout passes;
 * returns `[ready, notReady]`, each in the input order.
 */
export function wait<T>(
  refs: readonly ObjectRef<T>[],
  opts: WaitOptions = {},
): Promise<[ObjectRef<T>[], ObjectRef<T>[]]> {
  const want = Math.min(opts.numReturns ?? 1, refs.length);
  return new Promise((resolve) => {
    let count = 0;
    let done = false;
    const settled = new Set<ObjectRef<T>>();
    let timer: NodeJS.Timeout | undefined;
    const finish = () => {
      if (done) return;
      done = true;
      if (timer) clearTimeout(timer);
      const ready: ObjectRef<T>[] = [];
      const rest: ObjectRef<T>[] = [];
      for (const r of refs) (settled.has(r) && ready.length < want ? ready : rest).push(r);
      resolve([ready, rest]);
    };
    if (want === 0) return finish();
    for (const r of refs) {
      r._onSettled(() => {
        if (done || settled.has(r)) return;
        settled.add(r);
        if (++count >= want) finish();
      });
    }
    if (opts.timeoutMs !== undefined && !done) timer = setTimeout(finish, opts.timeoutMs);
  });
}

/** Options for `cancel`. */
export interface CancelOptions {
  /**
   * Kill the worker running the call (Ray's `force`); the actor restarts if its `maxRestarts`
   * allows, and its other calls in flight fail or retry as for any death. @default false
   */
  force?: boolean;
  /**
   * Ray's `recursive` (cancel the calls the cancelled call made). Not supported: calls made
   * inside a call are not tracked; passing `true` throws `InvalidArgumentError`. @default false
   */
  recursive?: boolean;
}

/**
 * Cancels an actor call or task (`ref` from `.remote()`, or a streaming call's generator). A
 * call still queued (in this process, or at the worker) never starts; a running one has its
 * `AbortSignal` aborted (`callSignal()` inside the method), and a streaming call's generator is
 * closed. The ref rejects at once with `TaskCancelledError` (a running call that ignores its
 * signal still finishes on the worker; its result is dropped). A call already answered, or a
 * ref that is not a call of this process, is left alone (returns false).
 */
export async function cancel(
  ref: ObjectRef<unknown> | ObjectRefGenerator<unknown>,
  opts: CancelOptions = {},
): Promise<boolean> {
  if (opts.recursive) {
    throw new InvalidArgumentError('cancel: recursive cancellation is not supported');
  }
  const rt = state().rt;
  const client = ActorClient.cancelOf(ref);
  if (!client) return false;
  if (opts.force) {
    await rt.headOnce({ type: 'killActor', actorId: client.actorId, noRestart: false });
  }
  return true;
}

/** Kills an actor. With `noRestart: false` it restarts if its `maxRestarts` allows. */
export async function kill(
  handle: ActorHandle<unknown>,
  opts: { noRestart?: boolean } = {},
): Promise<void> {
  await state().rt.headOnce({
    type: 'killActor',
    actorId: handle[kActorId],
    noRestart: opts.noRestart ?? true,
  });
}

/** A handle to the live actor registered under `name`. */
export async function getActor<C extends ActorConstructor>(
  name: string,
): Promise<ActorHandle<InstanceType<C>>> {
  const d = state();
  const info = await d.rt.headRequest({ type: 'getActorByName', name });
  const client = d.rt.actor(info.actorId, undefined, info.options.maxTaskRetries);
  return makeHandle<InstanceType<C>>(
    new ActorHandleCore(info.actorId, info.options.maxTaskRetries),
    (m, a, co) => callWithOptions(client, m, a, co),
  );
}

/** The head's record of an actor: state (PENDING, ALIVE, RESTARTING, DEAD), node, restarts. */
export function actorInfo(handle: ActorHandle<unknown>): Promise<ActorInfo> {
  return state().rt.actorInfo(handle[kActorId]);
}

/** Resolves when the actor is ALIVE; rejects with why it could not start (infeasible, load error). */
export function actorReady(handle: ActorHandle<unknown>): Promise<void> {
  return state().rt.actor(handle[kActorId]).ready();
}

/** Drops this ref's claim on its object now rather than at garbage collection. */
export function release(ref: ObjectRef<unknown>): void {
  state().rt.objects.release(ref);
}

/**
 * What the object store of the process at `address` (an `ObjectRef`'s `owner`, an actor's
 * `ActorInfo.address`; this process's own when omitted) holds, and the fetches of its objects it
 * has served, per fetching node and by path (socket or shared memory). A debug surface: it shows,
 * for one, that a value crossed to each node once.
 */
export async function objectStats(address?: string): Promise<ObjectStoreStats> {
  const rt = state().rt;
  if (address === undefined || address === rt.server.address) return rt.objects.stats();
  return (await rt.peer(address)).request({ type: 'objectStats' });
}

/** Nodes known to the head. */
export function listNodes(): Promise<NodeInfo[]> {
  return state().rt.headRequest({ type: 'listNodes' });
}

/** Actors known to the head. */
export function listActors(): Promise<ActorInfo[]> {
  return state().rt.headRequest({ type: 'listActors' });
}

/** A reserved set of resource bundles. */
export interface PlacementGroup {
  readonly id: string;
  /** Resolves once every bundle is reserved; rejects when the group can never fit. */
  ready(): Promise<void>;
  /** Frees the bundles and kills the actors placed in them. */
  remove(): Promise<void>;
}

/**
 * Reserves bundles of resources atomically (gang scheduling), e.g.
 * `placementGroup([{ CPU: 1, GPU: 1 }, { CPU: 1, GPU: 1 }], { strategy: 'STRICT_SPREAD' })`.
 */
export function placementGroup(
  bundles: ResourceMap[],
  opts: PlacementGroupOptions = {},
): PlacementGroup {
  const d = state();
  const pgId = `pg_${d.rt.newId()}`;
  const created = d.rt.headOnce({
    type: 'createPlacementGroup',
    pgId,
    bundles,
    strategy: opts.strategy ?? 'PACK',
    name: opts.name,
    detached: opts.lifetime === 'detached',
  });
  created.catch(() => {});
  return {
    id: pgId,
    ready: async () => {
      await created;
      await d.rt.headRequest({ type: 'waitPlacementGroup', pgId });
    },
    remove: async () => {
      await created.catch(() => {});
      await d.rt.headOnce({ type: 'removePlacementGroup', pgId });
    },
  };
}

export { ObjectRef, ObjectRefGenerator, kActorId };
