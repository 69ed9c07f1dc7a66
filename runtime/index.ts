/**
 * rtjob: a Ray-style actor runtime. The public API; see `runtime/README.md`.
 *
 * @module
 */
export {
  actorInfo,
  actorReady,
  cancel,
  defineActor,
  defineTask,
  get,
  getActor,
  init,
  kill,
  listActors,
  listNodes,
  objectStats,
  placementGroup,
  put,
  release,
  shutdown,
  wait,
} from './api.ts';
export type {
  CancelOptions,
  ClusterInfo,
  GetOptions,
  InitOptions,
  PlacementGroup,
  WaitOptions,
} from './api.ts';
export { callSignal } from './call-context.ts';
export { ObjectRef } from './client/object-ref.ts';
export { ObjectRefGenerator } from './client/ref-generator.ts';
export {
  CollectiveGroup,
  collectiveGroupDefaults,
  initCollectiveGroup,
} from './collective/group.ts';
export type {
  AllreduceOptions,
  BroadcastOptions,
  CollectiveGroupOptions,
  CollectiveStats,
  Tensors,
} from './collective/group.ts';
export { createMetricsLogger, metrics } from '../ops/metrics.ts';
export type {
  MetricsLogger,
  MetricsLoggerOptions,
  MetricValues,
  SampleRecord,
} from '../ops/metrics.ts';
export * from './errors.ts';
export { kActorId } from './handles.ts';
export type {
  ActorClass,
  ActorHandle,
  ActorOptions,
  CallOptions,
  ConcurrencyGroupOptions,
  NotAGenerator,
  PlacementGroupOptions,
  RefOr,
  RemoteMethod,
  StreamingCallOptions,
  StreamingMethod,
  StreamingTask,
  TaskFunction,
  TaskOptions,
  YieldOf,
} from './handles.ts';
export type { ClientEvent, Head, HeadEvents, HeadOptions } from './head/head.ts';
export type { LocalCluster, LocalClusterOptions } from './local-cluster.ts';
export type { NodeAgent, NodeAgentOptions, WorkerProcess } from './node/agent.ts';
export { startHead, startLocalCluster, startNodeAgent } from './launch.ts';
export type {
  ActorInfo,
  ActorState,
  DeathCause,
  FetchesServed,
  NodeInfo,
  ObjectStoreStats,
  PlacementGroupInfo,
  PlacementStrategy,
  ResourceMap,
} from './protocol.ts';
