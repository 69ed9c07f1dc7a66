/**
 * The wire protocol: every message any rtjob process sends, as one discriminated union on `type`,
 * and the msgpack codec (msgpackr) that carries them. One file on purpose (longer than most): a
 * frame read from a socket explains itself from here alone. Typed arrays travel as msgpack extensions
 * (no base64, no JSON), object refs and actor handles as their own extensions.
 *
 * A WebSocket frame holds one or more packed messages back to back; requests carry `rid` and are
 * answered by a `reply` with the same `rid`. Messages larger than the transport's bulk threshold go
 * over the connection's bulk link (`bulk.ts`), so they never hold up other traffic on it.
 *
 * Over 500 lines on purpose: every message of every process in one place, so a frame read from
 * a socket explains itself (STYLE.md). Each message's schema is in `wire-schemas.ts`.
 *
 * @module
 */
import { Packr, addExtension } from 'msgpackr';
import type { WireError } from './errors.ts';

/** Resources as the scheduler counts them: `CPU`, `GPU`, `memory` (bytes) and custom names. */
export type ResourceMap = Record<string, number>;

/** Where an actor's code lives. */
export interface ActorSpecWire {
  /** Absolute `file://` URL of the module. */
  readonly moduleUrl: string;
  readonly exportName: string;
  /** `actor`: construct `exportName`; `tasks`: a task runner (the export is resolved per call). */
  readonly kind: 'actor' | 'tasks';
}

/** Scheduling strategy for one actor. */
export type SchedulingStrategy =
  | 'DEFAULT'
  | 'SPREAD'
  | { readonly type: 'node'; readonly nodeId: string; readonly soft?: boolean };

export type PlacementStrategy = 'PACK' | 'SPREAD' | 'STRICT_PACK' | 'STRICT_SPREAD';

/** Actor options as the head receives them (already defaulted by the client). */
export interface ActorOptionsWire {
  readonly name?: string;
  readonly resources: ResourceMap;
  readonly detached: boolean;
  readonly maxRestarts: number;
  readonly maxTaskRetries: number;
  readonly maxConcurrency: number;
  /** Concurrency groups besides the default one (`maxConcurrency`): name → calls at once. */
  readonly concurrencyGroups?: Readonly<Record<string, number>>;
  /** The groups of `concurrencyGroups` whose calls run on a thread of their own. */
  readonly threadGroups?: readonly string[];
  readonly placementGroupId?: string;
  readonly bundleIndex: number;
  readonly schedulingStrategy: SchedulingStrategy;
  readonly env?: Record<string, string>;
  readonly jobId?: string;
}

export type ActorState = 'PENDING' | 'ALIVE' | 'RESTARTING' | 'DEAD';

/** Why an actor's process ended. */
export interface DeathCause {
  readonly reason:
    | 'exited'
    | 'killed'
    | 'node-died'
    | 'owner-died'
    | 'load-failed'
    | 'infeasible'
    | 'out-of-memory';
  readonly message: string;
  /** `out-of-memory`: what the node's memory monitor saw when it killed the worker. */
  readonly memory?: MemoryKill;
  readonly exitCode?: number | null;
  readonly signal?: string | null;
  readonly stderrTail?: string[];
  readonly error?: WireError;
}

/** A node agent's memory monitor killed a worker: where, why, and whom. */
export interface MemoryKill {
  readonly nodeId: string;
  /** Memory in use (of the agent's cgroup when it has a limit, else of the machine). */
  readonly usedBytes: number;
  readonly totalBytes: number;
  /** The share of `totalBytes` past which the monitor kills. */
  readonly threshold: number;
  readonly pid: number;
  /** The killed worker's resident memory, when it could be read. */
  readonly rssBytes: number | null;
}

/** What the head knows about an actor; also what `head.on('actor')` and `listActors` give. */
export interface ActorInfo {
  readonly actorId: string;
  readonly name?: string;
  readonly state: ActorState;
  readonly spec: ActorSpecWire;
  readonly options: ActorOptionsWire;
  readonly nodeId?: string;
  readonly address?: string;
  readonly pid?: number;
  /** Bumped on every (re)start; callers use it to tell a restarted actor from the old one. */
  readonly incarnation: number;
  readonly numRestarts: number;
  readonly ownerId: string;
  readonly deathCause?: DeathCause;
  readonly createdAtMs: number;
  readonly gpuIds?: number[];
}

export type NodeState = 'ALIVE' | 'DEAD';

/** What a node's machine and processes use, as its agent last sampled it (`nodeStats`). */
export type NodeUsage = Omit<NodeStats, 'type'> & {
  /** When the head received the sample. */
  readonly sampledAtMs: number;
};

export interface NodeInfo {
  readonly nodeId: string;
  readonly hostname: string;
  readonly host: string;
  readonly pid: number;
  readonly state: NodeState;
  readonly total: ResourceMap;
  readonly available: ResourceMap;
  readonly sessionDir: string;
  readonly startedAtMs: number;
  /** Live usage, absent until the node's first `nodeStats` (never stored). */
  readonly usage?: NodeUsage;
}

/** `RESCHEDULING`: a node holding some bundles died; those bundles wait for a new node. */
export type PlacementGroupState = 'PENDING' | 'CREATED' | 'RESCHEDULING' | 'REMOVED' | 'FAILED';

export interface PlacementGroupInfo {
  readonly pgId: string;
  readonly name?: string;
  readonly strategy: PlacementStrategy;
  readonly bundles: ResourceMap[];
  readonly state: PlacementGroupState;
  /** Node of each bundle once CREATED. */
  readonly bundleNodes?: string[];
  /** GPU indices each bundle holds on its node (so a restarted head restores them exactly). */
  readonly bundleGpuIds?: number[][];
  readonly ownerId: string;
  readonly detached: boolean;
}

// ---------------------------------------------------------------------------------------------
// Messages

/** Answer to any request. Exactly one of `value` / `error` is meaningful. */
export interface Reply {
  readonly type: 'reply';
  readonly rid: number;
  readonly value?: unknown;
  readonly error?: WireError;
}

/**
 * Server to client: open this connection's bulk link (`bulk.ts`), the server has a large message
 * for it. A client opens the link itself when it has one first.
 */
export interface BulkOpen {
  readonly type: 'bulkOpen';
}

// node agent → head
export interface RegisterNode {
  readonly type: 'registerNode';
  readonly rid: number;
  readonly nodeId?: string;
  readonly hostname: string;
  readonly host: string;
  readonly pid: number;
  readonly resources: ResourceMap;
  readonly sessionDir: string;
  /**
   * Workers still running on a node that re-registers (its head restarted): a restarted head
   * re-attaches the actors it recovered from its store and stops the rest. Absent on first join.
   */
  readonly workers?: readonly {
    readonly actorId: string;
    readonly incarnation: number;
    readonly pid: number;
  }[];
}
export interface WorkerExited {
  readonly type: 'workerExited';
  readonly actorId: string;
  readonly incarnation: number;
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly stderrTail: string[];
  /** Set when the node's memory monitor killed the worker. */
  readonly memory?: MemoryKill;
}

/**
 * Bytes a worker wrote to its stdout or stderr file at `offset`, shipped by a node agent on
 * another machine so that the head keeps every worker's logs (see `NodeAgentOptions.shipLogs`).
 */
export interface WorkerLog {
  readonly type: 'workerLog';
  readonly actorId: string;
  readonly incarnation: number;
  readonly stream: 'stdout' | 'stderr';
  readonly offset: number;
  readonly data: Uint8Array;
}

/** Calls a worker has served since its last report (one-way, every few seconds, for `/metrics`). */
export interface WorkerStats {
  readonly type: 'workerStats';
  readonly calls: number;
}

/** CPU (100 = one core) and resident memory of one process, as a node agent sampled it. */
export interface ProcessUsage {
  readonly pid: number;
  /** `null` on a process's first sample (CPU is a rate) or where `/proc` is missing. */
  readonly cpuPercent: number | null;
  readonly rssBytes: number | null;
}

/**
 * node agent → head, every few seconds (one-way): the machine's CPU and memory in use, and each
 * worker's and the agent's own, so the dashboard and `rtjob status` show live utilisation next
 * to what actors reserved. The head keeps only the latest.
 */
export interface NodeStats {
  readonly type: 'nodeStats';
  /** Busy share of all the machine's cores since the previous sample, 0–100. */
  readonly cpuPercent: number | null;
  readonly cpuCount: number;
  readonly memoryUsedBytes: number;
  readonly memoryTotalBytes: number;
  readonly agent: ProcessUsage;
  readonly workers: readonly (ProcessUsage & {
    readonly actorId: string;
    readonly incarnation: number;
  })[];
}

// head → node agent
export interface StartWorker {
  readonly type: 'startWorker';
  readonly actorId: string;
  readonly incarnation: number;
  readonly gpuIds: number[];
  readonly env: Record<string, string>;
}
export interface StopWorker {
  readonly type: 'stopWorker';
  readonly actorId: string;
  readonly incarnation: number;
}

// worker → head
export interface WorkerHello {
  readonly type: 'workerHello';
  readonly rid: number;
  readonly actorId: string;
  readonly incarnation: number;
}
/** Reply value of `workerHello`. */
export interface WorkerAssignment {
  readonly spec: ActorSpecWire;
  readonly options: ActorOptionsWire;
  /** Packed constructor arguments (kept packed so restarts rebuild from the same bytes). */
  readonly ctorArgs: Uint8Array;
}
export interface ActorReady {
  readonly type: 'actorReady';
  readonly rid: number;
  readonly actorId: string;
  readonly incarnation: number;
  readonly address: string;
  readonly pid: number;
}
export interface ActorLoadFailed {
  readonly type: 'actorLoadFailed';
  readonly rid: number;
  readonly actorId: string;
  readonly incarnation: number;
  readonly error: WireError;
}

// clients (drivers and workers) → head
export interface RegisterClient {
  readonly type: 'registerClient';
  readonly rid: number;
  readonly kind: 'driver' | 'worker';
  /** Actor id and incarnation for workers; absent for drivers. */
  readonly actorId?: string;
  readonly incarnation?: number;
  readonly jobId?: string;
  readonly pid: number;
  /** The client id a previous head gave this process; sent when reconnecting to keep ownership. */
  readonly clientId?: string;
}
export interface CreateActor {
  readonly type: 'createActor';
  readonly rid: number;
  /** Chosen by the client so the handle exists before the head answers. */
  readonly actorId: string;
  readonly spec: ActorSpecWire;
  readonly options: ActorOptionsWire;
  readonly ctorArgs: Uint8Array;
}
export interface WaitActor {
  readonly type: 'waitActor';
  readonly rid: number;
  readonly actorId: string;
  /** Reply once the actor is ALIVE with a higher incarnation than this, or DEAD. */
  readonly afterIncarnation: number;
  /**
   * When false, also reply as soon as incarnation `afterIncarnation` is known to have ended, so
   * a caller can fail its in-flight calls with the cause without waiting for the restart.
   */
  readonly untilAlive: boolean;
}
/** Reply value of `waitActor`. */
export interface ActorLocation {
  readonly state: ActorState;
  readonly address?: string;
  readonly incarnation: number;
  readonly deathCause?: DeathCause;
  /** Cause of the latest incarnation's end, when there was one. */
  readonly lastDeath?: DeathCause & { readonly incarnation: number };
}
export interface KillActor {
  readonly type: 'killActor';
  readonly rid: number;
  readonly actorId: string;
  readonly noRestart: boolean;
}
export interface GetActorByName {
  readonly type: 'getActorByName';
  readonly rid: number;
  readonly name: string;
}
export interface GetActorInfo {
  readonly type: 'getActorInfo';
  readonly rid: number;
  readonly actorId: string;
}
export interface ListActors {
  readonly type: 'listActors';
  readonly rid: number;
}
export interface ListNodes {
  readonly type: 'listNodes';
  readonly rid: number;
}
export interface CreatePlacementGroup {
  readonly type: 'createPlacementGroup';
  readonly rid: number;
  /** Chosen by the client so actors can name the group before the head answers. */
  readonly pgId?: string;
  readonly bundles: ResourceMap[];
  readonly strategy: PlacementStrategy;
  readonly name?: string;
  readonly detached: boolean;
}
export interface WaitPlacementGroup {
  readonly type: 'waitPlacementGroup';
  readonly rid: number;
  readonly pgId: string;
}
export interface RemovePlacementGroup {
  readonly type: 'removePlacementGroup';
  readonly rid: number;
  readonly pgId: string;
}
export interface KvPut {
  readonly type: 'kvPut';
  readonly rid: number;
  readonly key: string;
  readonly value: Uint8Array;
}
export interface KvGet {
  readonly type: 'kvGet';
  readonly rid: number;
  readonly key: string;
}
/**
 * node → head: the gzip'd archive of an uploaded working dir (`pkg://<hash>`), for a node that
 * runs one of its job's actors and has no copy yet. Replied with the archive's bytes.
 */
export interface FetchPackage {
  readonly type: 'fetchPackage';
  readonly rid: number;
  readonly hash: string;
}

// data plane: any client → a worker or object owner
export interface Call {
  readonly type: 'call';
  readonly rid: number;
  readonly method: string;
  readonly args: unknown[];
  /** A streaming call's id (its generator's id), named by its `streamItem`s and `streamAck`s. */
  readonly callId?: string;
  /**
   * A streaming call: the method is a generator; each item goes back as a `streamItem` as it is
   * produced and the reply is the number of items (an error item included).
   */
  readonly stream?: boolean;
  /** Streaming: items produced but not yet consumed by the caller before the generator pauses (0: no limit). */
  readonly backpressure?: number;
  /** The actor's concurrency group the call runs in. @default the default group */
  readonly group?: string;
}
/**
 * worker → caller (one-way): item `index` of streaming call `callId`, a value or the error the
 * generator threw there (the last item then). Large items travel over the bulk link, so items
 * may arrive out of order and after the call's reply: `index` and the reply's count order them.
 */
export interface StreamItem {
  readonly type: 'streamItem';
  readonly callId: string;
  readonly index: number;
  readonly value?: unknown;
  readonly error?: WireError;
}
/** caller → worker (one-way): the caller has consumed this many items of streaming call `callId`. */
export interface StreamAck {
  readonly type: 'streamAck';
  readonly callId: string;
  readonly consumed: number;
}
/**
 * caller → worker (one-way): cancel the call sent on this connection as request `callRid`.
 * Queued, it never starts; running, its `AbortSignal` is aborted (and a streaming call's
 * generator is closed).
 */
export interface CancelCall {
  readonly type: 'cancelCall';
  readonly callRid: number;
}
export interface Fetch {
  readonly type: 'fetch';
  readonly rid: number;
  readonly objectId: string;
  /** Ask for the bytes over this connection even when shared memory is possible. */
  readonly inline?: boolean;
}
export interface Borrow {
  readonly type: 'borrow';
  readonly rid: number;
  readonly objectId: string;
}
export interface Unborrow {
  readonly type: 'unborrow';
  readonly objectId: string;
}
/**
 * First message on a data-plane connection: the connecting process's `machineId` (its
 * `/dev/shm`), so large values it fetches or gets back from calls can go through shared memory,
 * and its node (a worker's), so the fetches it is served are counted per node
 * ({@link ObjectStoreStats}).
 */
export interface Hello {
  readonly type: 'hello';
  /** Absent where shared memory is off (`RTJOB_OBJECT_SHM=0`) or missing. */
  readonly machine?: string;
  /** Absent for a driver (it runs on no node). */
  readonly node?: string;
  /**
   * The process maps the shared-memory files it is given (`client/shm-map.ts`) instead of
   * reading them: they are never rewritten for reuse.
   */
  readonly map?: boolean;
}
/** Asks any process for its {@link ObjectStoreStats}. */
export interface ObjectStats {
  readonly type: 'objectStats';
  readonly rid: number;
}

/** Object fetches a process has served to one node, by the path the bytes took. */
export interface FetchesServed {
  /** Node id of the fetching process, or `''` for one on no node (a driver). */
  readonly node: string;
  /** Fetches answered over the socket (another machine, a small value, or shared memory off). */
  readonly socket: number;
  /** Fetches answered with a file in `/dev/shm` (a large value, same machine). */
  readonly sharedMemory: number;
}

/** What one process's object store holds and has served since it started. */
export interface ObjectStoreStats {
  /** Objects owned here and still alive. */
  readonly owned: number;
  /** Objects of other processes this one holds refs to. */
  readonly borrowed: number;
  /** Fetches of objects owned here, per fetching node. */
  readonly fetchesServed: readonly FetchesServed[];
  /**
   * Bytes of large values (typed arrays of 64 KiB or more) in memory of owned objects that have a
   * ref or a borrower: what the cap bounds.
   */
  readonly memoryBytes: number;
  /** Bytes of large values kept only for the hold after a transfer (freed within it; not capped). */
  readonly heldBytes: number;
  /** The cap on `memoryBytes` past which objects spill to disk. */
  readonly memoryCapBytes: number;
  /** Owned objects whose value is on disk (some may be in memory too, restored by a get). */
  readonly spilledObjects: number;
  /** Bytes of their files. */
  readonly spilledBytes: number;
  /** Values written to disk so far, and read back. */
  readonly spills: number;
  /** Values being written to disk now (still in memory until their file is complete). */
  readonly spillsInFlight: number;
  readonly restores: number;
  /**
   * Values this process got through shared memory: `mapped` (copy-on-write, no copy) or `copied`
   * into a buffer (where the mapper is off or cannot be built, `client/shm-map.ts`).
   */
  readonly sharedMemoryReads: { readonly mapped: number; readonly copied: number };
}
/**
 * Data-plane handshake: tells a worker which actor incarnation the caller meant to reach; a
 * worker that is not that incarnation closes the connection before any call on it runs.
 */
export interface Ping {
  readonly type: 'ping';
  readonly rid: number;
  readonly actorId?: string;
  readonly incarnation?: number;
}

/**
 * worker → head: "am I still incarnation `incarnation` of `actorId`?" Answered with how long the
 * worker may serve calls without asking again; refused (`NOT_FOUND`) once the head has replaced
 * or killed that incarnation, and the worker exits. See `runtime/worker/lease.ts`.
 */
export interface RenewLease {
  readonly type: 'renewLease';
  readonly rid: number;
  readonly actorId: string;
  readonly incarnation: number;
}

export type HeadRequest =
  | RegisterNode
  | WorkerHello
  | ActorReady
  | ActorLoadFailed
  | RenewLease
  | RegisterClient
  | CreateActor
  | WaitActor
  | KillActor
  | GetActorByName
  | GetActorInfo
  | ListActors
  | ListNodes
  | CreatePlacementGroup
  | WaitPlacementGroup
  | RemovePlacementGroup
  | KvPut
  | KvGet
  | FetchPackage;

export type DataRequest = Call | Fetch | Borrow | Ping | ObjectStats;

/** Reply value of `registerClient`. */
export interface ClientRegistration {
  readonly clientId: string;
  /** The head's session dir (absent for an in-memory head). */
  readonly sessionDir?: string;
}

/**
 * What each request is answered with (`void` for one-way messages the head receives). Keyed by
 * every message type the head or a data endpoint receives, so `Connection.request` returns the
 * right type and the head's handler table must return it (both checked by the compiler).
 */
export interface Replies {
  registerNode: { readonly nodeId: string };
  registerClient: ClientRegistration;
  workerExited: void;
  workerLog: void;
  workerStats: void;
  nodeStats: void;
  fetchPackage: Uint8Array;
  workerHello: WorkerAssignment;
  actorReady: boolean;
  actorLoadFailed: boolean;
  renewLease: { readonly leaseMs: number };
  createActor: { readonly actorId: string };
  waitActor: ActorLocation;
  killActor: void;
  getActorByName: ActorInfo;
  getActorInfo: ActorInfo;
  listActors: ActorInfo[];
  listNodes: NodeInfo[];
  createPlacementGroup: { readonly pgId: string };
  waitPlacementGroup: boolean;
  removePlacementGroup: boolean;
  kvPut: boolean;
  kvGet: Uint8Array | null;
  /** Whatever the actor method returned. */
  call: unknown;
  fetch: unknown;
  borrow: boolean;
  unborrow: void;
  hello: void;
  streamAck: void;
  cancelCall: void;
  ping: 'pong';
  objectStats: ObjectStoreStats;
}

/** The reply value of a request of type `T`. */
export type ReplyOf<T extends keyof Replies> = Replies[T];

/** A request as a caller writes it (no `rid`: the transport assigns it). */
export type AnyRequestBody = RequestBody<HeadRequest | DataRequest>;

/** Every message. */
export type Message =
  | Reply
  | BulkOpen
  | HeadRequest
  | WorkerExited
  | WorkerLog
  | WorkerStats
  | NodeStats
  | StartWorker
  | StopWorker
  | DataRequest
  | Unborrow
  | Hello
  | StreamItem
  | StreamAck
  | CancelCall;

export type MessageType = Message['type'];
export type MessageOf<T extends MessageType> = Extract<Message, { type: T }>;
/** A request message without its `rid` (the transport assigns it). */
export type RequestBody<M> = M extends { rid: number } ? Omit<M, 'rid'> : never;

/**
 * The endpoints a process serves, each accepting its own message types: the head's control
 * endpoint, a node agent's link to the head, a worker's link to the head, any process's data
 * plane (calls and object fetches), and a caller's connection to a peer's data plane (stream
 * items coming back). `any` is transport framing every endpoint handles.
 */
export type Endpoint = 'head' | 'node' | 'worker' | 'data' | 'caller' | 'any';

/** Who sends a message to the head: a connection not registered yet, a node agent, a driver or a worker. */
export type Sender = 'unregistered' | 'node' | 'driver' | 'worker';

const clients = ['driver', 'worker'] as const;

/**
 * Where each message type is received (`to`) and, for the head, who may send it (`from`). Keyed
 * by every `MessageType` (a missing or unknown type is a compile error), so what each endpoint
 * accepts, and from whom, is derived from the union and cannot drift.
 */
export const messageRoutes = {
  reply: { to: ['any'] },
  bulkOpen: { to: ['any'] },
  registerNode: { to: ['head'], from: ['unregistered'] },
  registerClient: { to: ['head'], from: ['unregistered'] },
  workerExited: { to: ['head'], from: ['node'] },
  workerLog: { to: ['head'], from: ['node'] },
  nodeStats: { to: ['head'], from: ['node'] },
  fetchPackage: { to: ['head'], from: ['node'] },
  workerStats: { to: ['head'], from: ['worker'] },
  workerHello: { to: ['head'], from: clients },
  actorReady: { to: ['head'], from: clients },
  actorLoadFailed: { to: ['head'], from: clients },
  renewLease: { to: ['head'], from: ['worker'] },
  createActor: { to: ['head'], from: clients },
  waitActor: { to: ['head'], from: clients },
  killActor: { to: ['head'], from: clients },
  getActorByName: { to: ['head'], from: clients },
  getActorInfo: { to: ['head'], from: clients },
  listActors: { to: ['head'], from: clients },
  listNodes: { to: ['head'], from: clients },
  createPlacementGroup: { to: ['head'], from: clients },
  waitPlacementGroup: { to: ['head'], from: clients },
  removePlacementGroup: { to: ['head'], from: clients },
  kvPut: { to: ['head'], from: clients },
  kvGet: { to: ['head'], from: clients },
  startWorker: { to: ['node'] },
  stopWorker: { to: ['node', 'worker'] },
  call: { to: ['data'] },
  fetch: { to: ['data'] },
  borrow: { to: ['data'] },
  unborrow: { to: ['data'] },
  ping: { to: ['data'] },
  hello: { to: ['data'] },
  objectStats: { to: ['data'] },
  streamAck: { to: ['data'] },
  cancelCall: { to: ['data'] },
  streamItem: { to: ['caller'] },
} as const satisfies {
  readonly [T in MessageType]: {
    readonly to: readonly Endpoint[];
    readonly from?: readonly Sender[];
  };
};

type ReceivedBy<E extends Endpoint> = {
  [T in MessageType]: E extends (typeof messageRoutes)[T]['to'][number] ? T : never;
}[MessageType];
/** Every message the head or a data endpoint receives has an entry in `Replies`, and no other. */
export type HeadBound = ReceivedBy<'head'>;
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const repliesCoverRequests: Same<keyof Replies, HeadBound | ReceivedBy<'data'>> = true;
void repliesCoverRequests;

/** Who may send `type` to the head (nobody, for a type the head does not receive). */
export function sendersOf(type: MessageType): readonly Sender[] {
  const route = messageRoutes[type] as { readonly from?: readonly Sender[] };
  return route.from ?? [];
}

/** Every `type` a peer may send; anything else closes the connection. */
export const messageTypes: ReadonlySet<string> = new Set<string>(Object.keys(messageRoutes));

/** The message types `endpoint` accepts (transport framing is handled before this check). */
export function acceptedBy(endpoint: Exclude<Endpoint, 'any'>): ReadonlySet<MessageType> {
  return new Set(
    (Object.entries(messageRoutes) as [MessageType, { to: readonly Endpoint[] }][])
      .filter(([, route]) => route.to.includes(endpoint))
      .map(([type]) => type),
  );
}

// ---------------------------------------------------------------------------------------------
// Codec

const packr = new Packr({
  useRecords: false,
  moreTypes: true,
  // Typed arrays and Buffers come back as copies that own their memory, never as views into a
  // frame that the transport may reuse.
  copyBuffers: true,
  int64AsType: 'number',
  mapsAsObjects: true,
});

/** Packs one value (a message, or constructor arguments) into msgpack bytes. */
export function pack(value: unknown): Buffer {
  return packr.pack(value);
}

/** Unpacks one value. Throws on malformed input. */
export function unpack(bytes: Uint8Array): unknown {
  return packr.unpack(bytes);
}

/** Unpacks every value packed back to back in `bytes` (one frame). Throws on malformed input. */
export function unpackFrame(bytes: Uint8Array): unknown[] {
  return packr.unpackMultiple(bytes) as unknown[];
}

/** A class the codec carries as its own msgpack extension (object refs, actor handles). */
export interface WireClass<T, W> {
  /** Extension type byte, 1–100. */
  readonly type: number;
  readonly Class: abstract new (...args: never[]) => T;
  write(value: T): W;
  read(wire: W): T;
}

/** Registers a class with the codec; call once per process at start-up. */
export function registerWireClass<T, W>(c: WireClass<T, W>): void {
  addExtension({
    Class: c.Class as unknown as new () => T,
    type: c.type,
    write: (v: T) => c.write(v),
    read: (w: W) => c.read(w),
  });
}

/** Checks the shape every message shares; returns a reason when it is not a message. */
export function invalidMessage(m: unknown): string | undefined {
  if (typeof m !== 'object' || m === null || Array.isArray(m)) return 'frame is not an object';
  const type = (m as { type?: unknown }).type;
  if (typeof type !== 'string') return 'message has no string type';
  if (!messageTypes.has(type)) return `unknown message type '${type.slice(0, 64)}'`;
  const rid = (m as { rid?: unknown }).rid;
  if (rid !== undefined && typeof rid !== 'number') return 'message rid is not a number';
  return undefined;
}
