/**
 * The actor runtime's public API (see `runtime/README.md`); the package's `rtjob` face
 * (`index.ts` at the root) re-exports it with the operator plane's metrics logger.
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
export { collectiveBackends, registerCollectiveBackend } from './collective/backend.ts';
export type {
  Collective,
  CollectiveBackend,
  CollectiveJoin,
  DeviceTensor,
  OpOptions,
  StoreMeeting,
  TensorSet,
} from './collective/backend.ts';
export type {
  AllreduceOptions,
  BroadcastOptions,
  CollectiveGroupOptions,
  CollectiveStats,
  Tensors,
} from './collective/group.ts';
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
