/**
 * The head process and the job drivers it runs, sampled the way node agents sample their workers
 * (the same `ProcessSampler` of `node/usage.ts`) and listed with the head's node: in `/api/nodes`,
 * `/api/cluster` (so `rtjob status`) and the dashboard's Processes table. The driver of a sync job
 * does real work (it gathers the rollouts' episodes and builds batches), so a user watching a run
 * sees it next to the workers.
 *
 * @module
 */
import { ProcessSampler } from '../../runtime/node/usage.ts';
import type { ClusterView, NodeView, ProcessView } from './cluster-view.ts';

/**
 * Drivers sampled at most, as a `nodeStats` message bounds its workers: the rows and the `/proc`
 * reads stay bounded whatever is submitted (the supervisor starts them in order; later ones wait).
 */
export const maxSampledDrivers = 256;

/** Options of {@link withHeadProcesses}. */
export interface HeadProcessesOptions {
  /** Time between samples; node agents sample every 2 s too. @default 2000 */
  intervalMs?: number;
}

/** A cluster view whose head's node lists the head and each job driver too. */
export interface SampledClusterView {
  readonly cluster: ClusterView;
  /** Stops sampling. */
  close(): void;
}

/**
 * Samples this process (the head) and each running driver's process group every `intervalMs`,
 * and returns `cluster` with them added to the head's node. A head that runs its node agent in
 * this process (`rtjob submit`'s private cluster) is listed once, as `head`.
 */
export function withHeadProcesses(
  cluster: ClusterView,
  drivers: () => readonly { jobId: string; pid: number }[],
  opts: HeadProcessesOptions = {},
): SampledClusterView {
  const sampler = new ProcessSampler();
  let rows: ProcessView[] = [];
  const none = { actorId: null, className: null, name: null };
  const sample = () => {
    const running = drivers().slice(0, maxSampledDrivers);
    const s = sampler.sample(
      [],
      running.map((d) => d.pid),
    );
    rows = [
      { ...s.self, kind: 'head', ...none, jobId: null },
      ...s.groups.map(
        ({ members: _, ...u }, i): ProcessView => ({
          ...u,
          kind: 'driver',
          ...none,
          jobId: running[i]!.jobId,
        }),
      ),
    ];
  };
  sample();
  const timer = setInterval(sample, opts.intervalMs ?? 2000);
  timer.unref();
  const withHead = (n: NodeView): NodeView => {
    // A driver that ended since the last sample is gone already.
    const live = new Set(drivers().map((d) => d.pid));
    return {
      ...n,
      processes: [
        ...rows.filter((p) => p.kind === 'head' || live.has(p.pid)),
        ...n.processes.filter((p) => !(p.kind === 'agent' && p.pid === process.pid)),
      ],
    };
  };
  return {
    cluster: {
      ...cluster,
      nodes: () => cluster.nodes().map((n) => (n.isHead && n.state === 'ALIVE' ? withHead(n) : n)),
    },
    close: () => clearInterval(timer),
  };
}
