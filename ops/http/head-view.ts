/**
 * Adapts the runtime {@link Head} to the {@link ClusterView} the HTTP API and dashboard read.
 * An actor belongs to the job its creator ran in: the runtime tags every actor a job's driver (or
 * one of its actors) creates with the job id (`options.jobId`), which survives head restarts.
 *
 * @module
 */
import { freemem, totalmem } from 'node:os';

import type { ActorInfo, NodeUsage } from '../../runtime/protocol.ts';
import type { Head, WorkerLogEvent } from '../../runtime/head/head.ts';
import type { OpsStore } from '../jobs/ops-store.ts';
import { indexWorkerLogs, shippedLogDir, writeShippedLog } from '../logs/worker-logs.ts';
import type { ActorView, ClusterView, NodeView, ProcessView } from './cluster-view.ts';

/** What a worker used at its node's latest sample. */
type WorkerUsage = Pick<ProcessView, 'cpuPercent' | 'rssBytes'>;

/**
 * An actor as the API shows it; `usage`: the latest sample of each worker, by
 * `actorId:incarnation`, so a restarted actor never shows its dead predecessor's figures.
 */
export function actorView(a: ActorInfo, usage?: ReadonlyMap<string, WorkerUsage>): ActorView {
  const u = a.state === 'ALIVE' ? usage?.get(`${a.actorId}:${a.incarnation}`) : undefined;
  return {
    actorId: a.actorId,
    className: a.spec.kind === 'tasks' ? '(task worker)' : a.spec.exportName,
    name: a.name ?? null,
    state: a.state,
    nodeId: a.nodeId ?? null,
    pid: a.pid ?? null,
    jobId: a.options.jobId ?? null,
    restarts: a.numRestarts,
    maxRestarts: a.options.maxRestarts,
    incarnation: a.incarnation,
    detached: a.options.detached,
    startedAt: a.createdAtMs,
    endedAt: null,
    deathCause: a.deathCause ? a.deathCause.message : null,
    cpuPercent: u?.cpuPercent ?? null,
    rssBytes: u?.rssBytes ?? null,
  };
}

/** Each live node's latest worker figures, by `actorId:incarnation`. */
function workerUsage(head: Head): Map<string, WorkerUsage> {
  const out = new Map<string, WorkerUsage>();
  for (const n of head.listNodes())
    for (const w of n.usage?.workers ?? []) out.set(`${w.actorId}:${w.incarnation}`, w);
  return out;
}

/**
 * Indexes every worker incarnation's stdout/stderr files as the head places it, so
 * `rtjob logs --actor` and the actor page find them after the worker, or the head, is gone.
 * The head's own node writes them in the session dir; other nodes ship them (`workerLog`), and
 * the head keeps its copy under `<session>/nodes/<nodeId>/logs/`.
 */
export function indexHeadWorkerLogs(head: Head, store: OpsStore): () => void {
  const sessionDir = head.sessionDir;
  const onLog = (piece: WorkerLogEvent) => {
    if (sessionDir) writeShippedLog(sessionDir, piece);
  };
  const seen = new Map<string, string>();
  const onActor = (a: ActorInfo) => {
    if (!a.nodeId || a.incarnation === 0) return;
    const key = `${a.actorId}:${a.incarnation}`;
    const stamp = `${a.nodeId}:${a.pid ?? ''}`;
    if (seen.get(key) === stamp) return;
    const node = head.listNodes().find((n) => n.nodeId === a.nodeId);
    if (!node) return;
    seen.set(key, stamp);
    const dir =
      node.sessionDir === sessionDir || !sessionDir
        ? node.sessionDir
        : shippedLogDir(sessionDir, node.nodeId);
    indexWorkerLogs(
      store,
      {
        actorId: a.actorId,
        incarnation: a.incarnation,
        nodeId: a.nodeId,
        jobId: a.options.jobId ?? null,
        pid: a.pid ?? null,
      },
      dir,
    );
  };
  for (const a of head.listActors()) onActor(a);
  head.on('actor', onActor);
  head.on('workerLog', onLog);
  return () => {
    head.off('actor', onActor);
    head.off('workerLog', onLog);
  };
}

/** The agent and each worker of a node's usage sample, with the actor each worker hosts. */
function processViews(u: NodeUsage, actors: ReadonlyMap<string, ActorInfo>): ProcessView[] {
  const agent: ProcessView = {
    ...u.agent,
    kind: 'agent',
    actorId: null,
    className: null,
    name: null,
    jobId: null,
  };
  return [
    agent,
    ...u.workers.map((w): ProcessView => {
      const a = actors.get(w.actorId);
      const view = a ? actorView(a) : undefined;
      return {
        pid: w.pid,
        kind: 'worker',
        actorId: w.actorId,
        className: view?.className ?? null,
        name: view?.name ?? null,
        jobId: view?.jobId ?? null,
        cpuPercent: w.cpuPercent,
        rssBytes: w.rssBytes,
      };
    }),
  ];
}

/** The runtime head as the HTTP API and dashboard read it. */
export function headClusterView(head: Head): ClusterView {
  const actors = (): ActorView[] => {
    const usage = workerUsage(head);
    return head.listActors().map((a) => actorView(a, usage));
  };
  return {
    nodes: (): NodeView[] => {
      const all = head.listNodes();
      const workers = new Map<string, number>();
      const byId = new Map<string, ActorInfo>();
      for (const a of head.listActors()) {
        byId.set(a.actorId, a);
        if (a.nodeId && a.state === 'ALIVE')
          workers.set(a.nodeId, (workers.get(a.nodeId) ?? 0) + 1);
      }
      // The head's own node agent shares its session dir; fall back to the first node.
      const headIdx = Math.max(
        0,
        all.findIndex((n) => n.sessionDir === head.sessionDir),
      );
      return all.map((n, i) => {
        const u = n.usage;
        // Until its agent's first sample the head's own node is this machine; another is unknown.
        const here = i === headIdx && !u;
        return {
          nodeId: n.nodeId,
          hostname: n.hostname,
          address: n.host,
          state: n.state,
          isHead: i === headIdx,
          resourcesTotal: { ...n.total } as Record<string, number>,
          resourcesAvailable: { ...n.available } as Record<string, number>,
          memoryTotalBytes: u?.memoryTotalBytes ?? (here ? totalmem() : 0),
          memoryUsedBytes: u?.memoryUsedBytes ?? (here ? totalmem() - freemem() : 0),
          cpuPercent: u?.cpuPercent ?? null,
          cpuCount: u?.cpuCount ?? null,
          usageSampledAt: u?.sampledAtMs ?? null,
          workers: workers.get(n.nodeId) ?? 0,
          processes: u ? processViews(u, byId) : [],
          startedAt: n.startedAtMs,
        };
      });
    },
    actors,
    killActor: async (id, o) =>
      head.killActor(id, { noRestart: o.noRestart, why: 'killed from the dashboard' }),
    restartActor: async (id) =>
      head.killActor(id, { noRestart: false, why: 'restarted from the dashboard' }),
    callsTotal: () => head.callsTotal,
    placementGroups: () => head.listPlacementGroups(),
    killJobActors: async (jobId) => {
      for (const a of actors())
        if (a.jobId === jobId && !a.detached && a.state !== 'DEAD')
          head.killActor(a.actorId, { noRestart: true, why: 'its job ended' });
    },
    onChange: (listener) => {
      const onActor = () => listener('actor');
      const onNode = () => listener('node');
      head.on('actor', onActor);
      head.on('node', onNode);
      return () => {
        head.off('actor', onActor);
        head.off('node', onNode);
      };
    },
  };
}
