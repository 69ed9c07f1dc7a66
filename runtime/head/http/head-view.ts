/**
 * Adapts the runtime {@link Head} to the {@link ClusterView} the HTTP API and dashboard read.
 * Actor → job attribution comes from the head's client events (a driver registers with its job
 * id; actors record their owner's client id).
 *
 * @module
 */
import { freemem, totalmem } from 'node:os';

import type { Head } from '../head.ts';
import type { ActorView, ClusterView, NodeView } from './cluster-view.ts';

export function headClusterView(head: Head): ClusterView {
  const jobOfClient = new Map<string, string>();
  head.on('client', (e) => {
    if (e.event === 'connected' && e.jobId) jobOfClient.set(e.clientId, e.jobId);
  });
  const actors = (): ActorView[] =>
    head.listActors().map((a) => ({
      actorId: a.actorId,
      className: a.spec.exportName,
      name: a.name ?? null,
      state: a.state,
      nodeId: a.nodeId ?? null,
      pid: a.pid ?? null,
      jobId: jobOfClient.get(a.ownerId) ?? null,
      restarts: a.numRestarts,
      detached: (a.options as { lifetime?: string }).lifetime === 'detached',
      startedAt: a.createdAtMs,
      endedAt: null,
      deathCause: a.deathCause ? a.deathCause.message : null,
    }));
  return {
    nodes: (): NodeView[] => {
      const all = head.listNodes();
      return all.map((n, i) => ({
        nodeId: n.nodeId,
        hostname: n.hostname,
        address: n.host,
        state: n.state,
        isHead: i === 0,
        resourcesTotal: { ...n.total } as Record<string, number>,
        resourcesAvailable: { ...n.available } as Record<string, number>,
        memoryTotalBytes: totalmem(),
        memoryUsedBytes: totalmem() - freemem(),
        workers: head.listActors().filter((a) => a.nodeId === n.nodeId && a.state === 'ALIVE').length,
        startedAt: n.startedAtMs,
      }));
    },
    actors,
    killActor: async (id, o) => head.killActor(id, { noRestart: o.noRestart }),
    restartActor: async (id) => head.killActor(id, { noRestart: false }),
    killJobActors: async (jobId) => {
      for (const a of actors()) if (a.jobId === jobId && !a.detached && a.state !== 'DEAD') head.killActor(a.actorId, { noRestart: true });
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
