/**
 * What the HTTP API and dashboard need from the runtime head: nodes, actors, and a few actions.
 * The runtime head provides it; {@link localClusterView} stands in for a head without a runtime
 * (jobs only), so the operations layer works and is testable on its own.
 *
 * @module
 */
import { cpus, freemem, hostname, totalmem } from 'node:os';
import type { PlacementGroupInfo } from '../../runtime/protocol.ts';
import { OpsError } from '../jobs/errors.ts';

/**
 * One process on a node and what it uses, as last sampled: workers and the agent by the node's
 * agent, the head and job drivers by the head (on the head's node).
 */
export interface ProcessView {
  /** For a `driver`, its `sh` wrapper's: the leader of the driver's process group. */
  pid: number;
  /**
   * `head`: the head process (when it runs the node agent too, as `rtjob submit`'s private
   * cluster does, the node has no `agent` row); `agent`: the node agent; `driver`: the driver of
   * job `jobId`, summed over its process group; `worker`: the worker hosting `actorId`.
   */
  kind: 'head' | 'agent' | 'driver' | 'worker';
  actorId: string | null;
  className: string | null;
  name: string | null;
  jobId: string | null;
  /** 100 = one core busy; null until the process's second sample. */
  cpuPercent: number | null;
  /** Resident memory; null where the node cannot read it. */
  rssBytes: number | null;
}

/**
 * One node as the dashboard shows it. Resources are logical (`CPU`, `GPU`, custom): what actors
 * reserved. Utilisation (`cpuPercent`, memory, `processes`) is what the machine really uses,
 * sampled by the node's agent every few seconds.
 */
export interface NodeView {
  nodeId: string;
  hostname: string;
  address: string;
  state: 'ALIVE' | 'DEAD';
  isHead: boolean;
  resourcesTotal: Record<string, number>;
  resourcesAvailable: Record<string, number>;
  /** 0 when not known (a node that never reported, or a finished session). */
  memoryTotalBytes: number;
  memoryUsedBytes: number;
  /** Busy share of all the machine's cores, 0–100; null when not known. */
  cpuPercent: number | null;
  /** Cores of the machine (not the logical `CPU` resource); null when not known. */
  cpuCount: number | null;
  /** When the usage figures were sampled; null when never. */
  usageSampledAt: number | null;
  /** Worker processes running on the node. */
  workers: number;
  /**
   * The agent and each worker process, with their CPU and memory, and on the head's node the head
   * and each job driver (empty when not known).
   */
  processes: ProcessView[];
  startedAt: number;
}

/** Actor states, as in the runtime. */
export type ActorState = 'PENDING' | 'ALIVE' | 'RESTARTING' | 'DEAD';

/** One actor as the dashboard and `/api/actors` show it. */
export interface ActorView {
  actorId: string;
  className: string;
  name: string | null;
  state: ActorState;
  nodeId: string | null;
  pid: number | null;
  jobId: string | null;
  restarts: number;
  /** Restarts allowed (-1: unlimited); absent when unknown. */
  maxRestarts?: number;
  /** Bumped on every (re)start of the actor's process. */
  incarnation?: number;
  detached: boolean;
  startedAt: number | null;
  endedAt: number | null;
  deathCause: string | null;
  /**
   * CPU (100 = one core) of the worker hosting the actor, as its node's agent last sampled it;
   * null when not sampled (not alive, a first sample, a finished session).
   */
  cpuPercent: number | null;
  /** Resident memory of the worker hosting the actor; null when not sampled. */
  rssBytes: number | null;
}

/** The runtime head as the operations layer sees it. */
export interface ClusterView {
  nodes(): NodeView[];
  actors(): ActorView[];
  killActor(actorId: string, opts: { noRestart: boolean }): Promise<void>;
  /** Kills the actor's process and lets the runtime restart it (when its maxRestarts allows). */
  restartActor?(actorId: string): Promise<void>;
  /** Kills a job's non-detached actors (its driver is gone). */
  killJobActors(jobId: string): Promise<void>;
  /** Placement groups with their state and the node of each bundle. */
  placementGroups?(): PlacementGroupInfo[];
  /** Actor calls the cluster has served, for the `calls/s` counter. */
  callsTotal?(): number;
  /** Subscribes to node/actor changes; returns an unsubscribe function. */
  onChange?(listener: (kind: 'node' | 'actor') => void): () => void;
}

/** A stand-in cluster of one node (this machine) with no actors. */
export function localClusterView(): ClusterView {
  const startedAt = Date.now();
  return {
    nodes: () => {
      const n = cpus().length;
      return [
        {
          nodeId: 'local',
          hostname: hostname(),
          address: '127.0.0.1',
          state: 'ALIVE',
          isHead: true,
          resourcesTotal: { CPU: n },
          resourcesAvailable: { CPU: n },
          memoryTotalBytes: totalmem(),
          memoryUsedBytes: totalmem() - freemem(),
          cpuPercent: null,
          cpuCount: cpus().length,
          usageSampledAt: null,
          workers: 0,
          processes: [],
          startedAt,
        },
      ];
    },
    actors: () => [],
    killActor: async (id) => {
      throw new OpsError('UNKNOWN_ACTOR', `no actor ${id}`);
    },
    killJobActors: async () => undefined,
  };
}

/** Sortable columns of the actor table. */
export const actorSortKeys = [
  'actorId',
  'className',
  'name',
  'state',
  'nodeId',
  'pid',
  'jobId',
  'restarts',
  'startedAt',
] as const;
export type ActorSortKey = (typeof actorSortKeys)[number];

/** A page of actors. */
export interface ActorPage {
  total: number;
  offset: number;
  limit: number;
  rows: ActorView[];
  /** Actors per state, over the filter without the state filter (the tabs' counts). */
  states: Record<string, number>;
}

/** A page request against the actor table. */
export interface ActorQuery {
  offset?: number;
  /** @default 50, at most 1000 */
  limit?: number;
  sort?: ActorSortKey;
  order?: 'asc' | 'desc';
  state?: ActorState;
  jobId?: string;
  className?: string;
  nodeId?: string;
  /** Case-insensitive substring of id, class or name. */
  q?: string;
}

/** Filters, sorts and pages actors on the server, so the page stays small at any cluster size. */
export function queryActors(all: readonly ActorView[], q: ActorQuery): ActorPage {
  const needle = q.q?.toLowerCase();
  const states: Record<string, number> = {};
  const rows = all.filter((a) => {
    if (q.jobId && a.jobId !== q.jobId) return false;
    if (q.className && a.className !== q.className) return false;
    if (q.nodeId && a.nodeId !== q.nodeId) return false;
    if (
      needle &&
      !a.actorId.toLowerCase().includes(needle) &&
      !a.className.toLowerCase().includes(needle) &&
      !(a.name ?? '').toLowerCase().includes(needle)
    ) {
      return false;
    }
    states[a.state] = (states[a.state] ?? 0) + 1;
    return !q.state || a.state === q.state;
  });
  const key = q.sort ?? 'startedAt';
  const dir = q.order === 'asc' ? 1 : -1;
  rows.sort((x, y) => {
    const a = x[key];
    const b = y[key];
    if (a === b) return x.actorId < y.actorId ? -dir : dir;
    if (a === null) return 1;
    if (b === null) return -1;
    return (a < b ? -1 : 1) * dir;
  });
  const limit = Math.min(Math.max(1, q.limit ?? 50), 1000);
  const offset = Math.max(0, q.offset ?? 0);
  return { total: rows.length, offset, limit, rows: rows.slice(offset, offset + limit), states };
}
