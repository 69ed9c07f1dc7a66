/**
 * What the head's parts share: the records it keeps per node, actor and placement group, the
 * events it emits, and the context object every part (nodes, actors, placement groups, recovery)
 * reads and writes. Only the head's own modules import this.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import type {
  ActorInfo,
  ActorLocation,
  DeathCause,
  NodeInfo,
  NodeUsage,
  PlacementGroupInfo,
  WorkerLog,
} from '../protocol.ts';
import type { Connection } from '../transport.ts';
import type { Allocation, ResourcePool } from './resources.ts';
import type { BundleReservation, SchedNode } from './scheduler.ts';
import type { HeadStore } from './store.ts';

/** A client (driver or worker) connection as the head reports it. */
export interface ClientEvent {
  readonly clientId: string;
  readonly kind: 'driver' | 'worker';
  readonly jobId?: string;
  readonly event: 'connected' | 'disconnected';
}

/** Worker output shipped by a remote node agent (`workerLog`), with the node it came from. */
export type WorkerLogEvent = Omit<WorkerLog, 'type'> & { readonly nodeId: string };

/** Events of a `Head`. */
export interface HeadEvents {
  actor: [ActorInfo];
  /** Stored by whoever keeps logs (the operations layer); the head itself keeps none. */
  workerLog: [WorkerLogEvent];
  node: [NodeInfo];
  placementGroup: [PlacementGroupInfo];
  client: [ClientEvent];
}

export type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** Where an actor's resources came from, so they go back to the same pool. */
export interface ActorAlloc {
  node: SchedNode;
  pool: ResourcePool;
  alloc: Allocation;
  /** Marked dead before its exit report: no longer counted for SPREAD. */
  uncounted?: boolean;
}

/** Someone waiting in `waitActor`. */
export interface ActorWaiter {
  afterIncarnation: number;
  untilAlive: boolean;
  resolve(l: ActorLocation): void;
}

export interface ActorRec {
  info: Mutable<ActorInfo>;
  ctorArgs: Uint8Array;
  alloc?: ActorAlloc;
  waiters: ActorWaiter[];
  killIntent?: 'noRestart' | 'restart';
  lastDeath?: DeathCause & { incarnation: number };
}

export interface NodeRec {
  info: Mutable<NodeInfo>;
  conn: Connection;
  sched: SchedNode;
  /** The node's latest `nodeStats`; live only, never stored. */
  usage?: NodeUsage;
}

export interface PgRec {
  info: Mutable<PlacementGroupInfo>;
  reservations?: BundleReservation[];
  bundlePools?: ResourcePool[];
  waiters: { resolve(): void; reject(e: Error): void }[];
  failure?: string;
  /** Bundles whose node died, waiting for a new node (state RESCHEDULING). */
  lostBundles?: number[];
  /**
   * Head restart: bundles whose node has not re-registered yet (state RESCHEDULING). They are
   * re-attached where they were, or re-reserved elsewhere when the recovery window ends.
   */
  restoring?: Set<number>;
}

/** The head's options once defaulted (see `HeadOptions` in head.ts). */
export interface ResolvedHeadOptions {
  readonly host: string;
  readonly port: number;
  readonly token: string;
  readonly sessionDir?: string;
  readonly nodeHeartbeatTimeoutMs: number;
  readonly heartbeatIntervalMs: number;
  readonly registerTimeoutMs: number;
  readonly maxDeadActors: number;
  readonly deadActorTtlMs: number;
  readonly maxFrameBytes: number;
  readonly holdProcess?: boolean;
}

/** The state every part of the head shares; each part owns the methods that change its records. */
export class HeadContext {
  readonly nodes = new Map<string, NodeRec>();
  readonly actors = new Map<string, ActorRec>();
  readonly pgs = new Map<string, PgRec>();
  /** Connected clients by id, so a reconnecting client can resume its id (and its actors). */
  readonly clients = new Map<string, Connection>();
  /** Head connections of workers, by `actorId:incarnation`. */
  readonly workerConns = new Map<string, Connection>();
  /** Set once `close` starts: nothing is written or emitted after it. */
  closing = false;

  constructor(
    readonly opts: ResolvedHeadOptions,
    readonly store: HeadStore,
    readonly events: EventEmitter<HeadEvents>,
    /** Retries everything waiting for resources, once per tick. */
    readonly schedulePump: () => void,
  ) {}

  get sessionDir(): string | undefined {
    return this.opts.sessionDir;
  }
}

/** A fresh id with `prefix` (`node_`, `pg_`, `driver_`) and 12 hex digits. */
export function newId(prefix: string): string {
  return `${prefix}${randomBytes(6).toString('hex')}`;
}
