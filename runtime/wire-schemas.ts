/**
 * One schema per wire message type, with limits, checked by the transport before any handler
 * sees a message. The compiler checks each schema against its type in `protocol.ts` (both ways),
 * and that every message type has exactly one schema, so the protocol and its checks cannot
 * drift.
 *
 * A request that fails its schema is answered with `InvalidArgumentError` naming the field (the
 * connection stays up); a one-way message or a reply that fails closes the connection.
 *
 * @module
 */
import { isRuntimeErrorCode, type WireError } from './errors.ts';
import type { MessageOf, MessageType } from './protocol.ts';
import {
  type Infer,
  type SameShape,
  type Schema,
  any,
  arr,
  bool,
  bytes,
  custom,
  int,
  lit,
  nullable,
  num,
  obj,
  oneOf,
  opt,
  record,
  str,
} from './schema.ts';

/** Limits on what one message may carry. */
export const wireLimits = {
  /** Ids: actors, nodes, placement groups, clients, objects. */
  idChars: 128,
  nameChars: 256,
  pathChars: 4096,
  resourceKeys: 64,
  /** Largest resource amount (memory in bytes fits). */
  resourceMax: 2 ** 53 - 1,
  envKeys: 1024,
  envValueChars: 128 * 1024,
  bundles: 1024,
  workersPerNode: 100_000,
  stderrLines: 1000,
  lineChars: 64 * 1024,
  kvKeyChars: 1024,
  kvValueBytes: 16 * 1024 * 1024,
  ctorArgsBytes: 256 * 1024 * 1024,
  callArgs: 1024,
  /** Concurrency groups of one actor. */
  concurrencyGroups: 64,
  /** CPU percent of one process (100 = one core), so at most this many cores' worth. */
  processCpuPercentMax: 100 * 4096,
  /** Bytes of one piece of a worker's log. */
  logDataBytes: 64 * 1024 * 1024,
} as const;

const L = wireLimits;
const rid = int();
const id = str({ max: L.idChars, min: 1 });
const incarnation = int({ max: 2 ** 31 });
const pid = int({ max: 2 ** 31 });
const resources = record(num({ min: 0, max: L.resourceMax }), L.resourceKeys);
const env = record(str({ max: L.envValueChars }), L.envKeys);
const bytesAmount = int({ max: L.resourceMax });
const processUsage = {
  pid,
  cpuPercent: nullable(num({ min: 0, max: L.processCpuPercentMax })),
  rssBytes: nullable(bytesAmount),
};

/**
 * An error in wire form: name, code and message as strings (context is the sender's). A runtime
 * error's code is one of the runtime's; a user error (`task`) may carry its own code and fields.
 */
const wireError = custom<WireError>('an error (name, code, message)', (v) => {
  if (typeof v !== 'object' || v === null) return false;
  const e = v as Record<string, unknown>;
  return (
    typeof e.name === 'string' &&
    typeof e.message === 'string' &&
    typeof e.code === 'string' &&
    (e.task === true ? e.code.length <= L.nameChars : isRuntimeErrorCode(e.code)) &&
    (e.task === undefined || e.task === true) &&
    (e.stack === undefined || typeof e.stack === 'string') &&
    (e.context === undefined || (typeof e.context === 'object' && e.context !== null)) &&
    (e.fields === undefined || (typeof e.fields === 'object' && e.fields !== null))
  );
});

const spec = obj({
  moduleUrl: str({ max: L.pathChars }),
  exportName: str({ max: L.nameChars }),
  kind: lit('actor', 'tasks'),
});

const schedulingStrategy = oneOf(
  lit('DEFAULT', 'SPREAD'),
  obj({ type: lit('node'), nodeId: id, soft: opt(bool()) }),
);

const actorOptions = obj({
  name: opt(str({ max: L.nameChars })),
  resources,
  detached: bool(),
  maxRestarts: int({ min: -1, max: 2 ** 31 }),
  maxTaskRetries: int({ min: -1, max: 2 ** 31 }),
  maxConcurrency: int({ min: 1, max: 2 ** 20 }),
  concurrencyGroups: opt(record(int({ min: 1, max: 2 ** 20 }), L.concurrencyGroups)),
  threadGroups: opt(arr(str({ max: L.nameChars }), L.concurrencyGroups)),
  placementGroupId: opt(id),
  bundleIndex: int({ min: -1, max: L.bundles }),
  schedulingStrategy,
  env: opt(env),
  jobId: opt(id),
});

/** Every message's schema, keyed by type. */
export const messageSchemas = {
  reply: obj({ type: lit('reply'), rid, value: opt(any()), error: opt(wireError) }),
  bulkOpen: obj({ type: lit('bulkOpen') }),
  registerNode: obj({
    type: lit('registerNode'),
    rid,
    nodeId: opt(id),
    hostname: str({ max: L.nameChars }),
    host: str({ max: L.nameChars }),
    pid,
    resources,
    sessionDir: str({ max: L.pathChars }),
    workers: opt(arr(obj({ actorId: id, incarnation, pid }), L.workersPerNode)),
  }),
  workerExited: obj({
    type: lit('workerExited'),
    actorId: id,
    incarnation,
    exitCode: nullable(int({ min: -(2 ** 31), max: 2 ** 31 })),
    signal: nullable(str({ max: 32 })),
    stderrTail: arr(str({ max: L.lineChars }), L.stderrLines),
    memory: opt(
      obj({
        nodeId: id,
        usedBytes: bytesAmount,
        totalBytes: bytesAmount,
        threshold: num({ min: 0, max: 1 }),
        pid,
        rssBytes: nullable(bytesAmount),
      }),
    ),
  }),
  workerLog: obj({
    type: lit('workerLog'),
    actorId: id,
    incarnation,
    stream: lit('stdout', 'stderr'),
    offset: int(),
    data: bytes(L.logDataBytes),
  }),
  workerStats: obj({ type: lit('workerStats'), calls: int() }),
  nodeStats: obj({
    type: lit('nodeStats'),
    cpuPercent: nullable(num({ min: 0, max: 100 })),
    cpuCount: int({ min: 1, max: 1 << 20 }),
    memoryUsedBytes: bytesAmount,
    memoryTotalBytes: bytesAmount,
    agent: obj(processUsage),
    workers: arr(obj({ ...processUsage, actorId: id, incarnation }), L.workersPerNode),
  }),
  startWorker: obj({
    type: lit('startWorker'),
    actorId: id,
    incarnation,
    gpuIds: arr(int({ max: 1024 }), 1024),
    env,
  }),
  stopWorker: obj({ type: lit('stopWorker'), actorId: id, incarnation }),
  workerHello: obj({ type: lit('workerHello'), rid, actorId: id, incarnation }),
  actorReady: obj({
    type: lit('actorReady'),
    rid,
    actorId: id,
    incarnation,
    address: str({ max: L.nameChars, min: 1 }),
    pid,
  }),
  renewLease: obj({ type: lit('renewLease'), rid, actorId: id, incarnation }),
  actorLoadFailed: obj({
    type: lit('actorLoadFailed'),
    rid,
    actorId: id,
    incarnation,
    error: wireError,
  }),
  registerClient: obj({
    type: lit('registerClient'),
    rid,
    kind: lit('driver', 'worker'),
    actorId: opt(id),
    incarnation: opt(incarnation),
    jobId: opt(id),
    pid,
    clientId: opt(id),
  }),
  createActor: obj({
    type: lit('createActor'),
    rid,
    actorId: str({ min: 8, max: 64 }),
    spec,
    options: actorOptions,
    ctorArgs: bytes(L.ctorArgsBytes),
  }),
  waitActor: obj({
    type: lit('waitActor'),
    rid,
    actorId: id,
    afterIncarnation: incarnation,
    untilAlive: bool(),
  }),
  killActor: obj({ type: lit('killActor'), rid, actorId: id, noRestart: bool() }),
  getActorByName: obj({ type: lit('getActorByName'), rid, name: str({ max: L.nameChars }) }),
  getActorInfo: obj({ type: lit('getActorInfo'), rid, actorId: id }),
  listActors: obj({ type: lit('listActors'), rid }),
  listNodes: obj({ type: lit('listNodes'), rid }),
  createPlacementGroup: obj({
    type: lit('createPlacementGroup'),
    rid,
    pgId: opt(id),
    bundles: arr(resources, L.bundles, 1),
    strategy: lit('PACK', 'SPREAD', 'STRICT_PACK', 'STRICT_SPREAD'),
    name: opt(str({ max: L.nameChars })),
    detached: bool(),
  }),
  waitPlacementGroup: obj({ type: lit('waitPlacementGroup'), rid, pgId: id }),
  removePlacementGroup: obj({ type: lit('removePlacementGroup'), rid, pgId: id }),
  kvPut: obj({
    type: lit('kvPut'),
    rid,
    key: str({ max: L.kvKeyChars }),
    value: bytes(L.kvValueBytes),
  }),
  kvGet: obj({ type: lit('kvGet'), rid, key: str({ max: L.kvKeyChars }) }),
  fetchPackage: obj({ type: lit('fetchPackage'), rid, hash: str({ pattern: /^[0-9a-f]{64}$/ }) }),
  call: obj({
    type: lit('call'),
    rid,
    method: str({ max: L.nameChars }),
    args: arr(any(), L.callArgs),
    callId: opt(id),
    stream: opt(bool()),
    backpressure: opt(int({ max: 2 ** 31 })),
    group: opt(str({ max: L.nameChars })),
  }),
  streamItem: obj({
    type: lit('streamItem'),
    callId: id,
    index: int({ max: 2 ** 52 }),
    value: opt(any()),
    error: opt(wireError),
  }),
  streamAck: obj({ type: lit('streamAck'), callId: id, consumed: int({ max: 2 ** 52 }) }),
  cancelCall: obj({ type: lit('cancelCall'), callRid: rid }),
  fetch: obj({ type: lit('fetch'), rid, objectId: id, inline: opt(bool()) }),
  borrow: obj({ type: lit('borrow'), rid, objectId: id }),
  unborrow: obj({ type: lit('unborrow'), objectId: id }),
  hello: obj({
    type: lit('hello'),
    machine: opt(str({ max: L.pathChars })),
    node: opt(id),
    map: opt(bool()),
  }),
  objectStats: obj({ type: lit('objectStats'), rid }),
  ping: obj({ type: lit('ping'), rid, actorId: opt(id), incarnation: opt(incarnation) }),
} satisfies { [T in MessageType]: Schema<unknown> };

type Schemas = typeof messageSchemas;
/** `never` unless every schema accepts exactly its message type (see `SameShape`). */
type Mismatched = {
  [T in MessageType]: SameShape<Infer<Schemas[T]>, MessageOf<T>> extends true ? never : T;
}[MessageType];
const everySchemaMatchesItsType: [Mismatched] extends [never] ? true : Mismatched = true;
void everySchemaMatchesItsType;

/**
 * Why `m` (already known to have a known string `type`) is not a valid message of that type, or
 * `undefined` when it is.
 */
export function invalidFields(m: { type: MessageType }): string | undefined {
  return (messageSchemas[m.type] as Schema<unknown>).check(m, '');
}
