/**
 * `/metrics` in the Prometheus text exposition format (version 0.0.4): nodes, resources, actors
 * by state, jobs by status, actor calls, and the latest value of every running job's metrics.
 *
 * @module
 */
import type { JobInfo } from '../jobs/ops-store.ts';
import type { ActorView, NodeView } from './cluster-view.ts';

function label(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function num(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

/** Inputs of {@link renderPrometheus}. */
export interface PrometheusInput {
  nodes: NodeView[];
  actors: ActorView[];
  jobs: JobInfo[];
  callsTotal?: number;
  jobMetrics: { jobId: string; name: string; step: number; value: number }[];
}

/** Renders the exposition text. */
export function renderPrometheus(input: PrometheusInput): string {
  const out: string[] = [];
  const family = (name: string, type: 'gauge' | 'counter', help: string) =>
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
  const sample = (name: string, labels: Record<string, string>, v: number) => {
    const l = Object.entries(labels)
      .map(([k, x]) => `${k}="${label(x)}"`)
      .join(',');
    out.push(`${name}${l ? `{${l}}` : ''} ${num(v)}`);
  };

  family('rtjob_nodes', 'gauge', 'Nodes by state.');
  for (const state of ['ALIVE', 'DEAD']) {
    sample('rtjob_nodes', { state }, input.nodes.filter((n) => n.state === state).length);
  }
  family('rtjob_node_resource_total', 'gauge', 'Logical resources of a node.');
  for (const n of input.nodes) {
    for (const [resource, v] of Object.entries(n.resourcesTotal)) {
      sample('rtjob_node_resource_total', { node_id: n.nodeId, resource }, v);
    }
  }
  family('rtjob_node_resource_used', 'gauge', 'Logical resources of a node in use.');
  for (const n of input.nodes) {
    for (const [resource, v] of Object.entries(n.resourcesTotal)) {
      sample(
        'rtjob_node_resource_used',
        { node_id: n.nodeId, resource },
        v - (n.resourcesAvailable[resource] ?? v),
      );
    }
  }
  family('rtjob_node_memory_used_bytes', 'gauge', 'Memory in use on a node.');
  for (const n of input.nodes)
    sample('rtjob_node_memory_used_bytes', { node_id: n.nodeId }, n.memoryUsedBytes);
  family('rtjob_node_cpu_percent', 'gauge', "Busy share of a node machine's cores, 0-100.");
  for (const n of input.nodes)
    if (n.cpuPercent !== null)
      sample('rtjob_node_cpu_percent', { node_id: n.nodeId }, n.cpuPercent);
  family('rtjob_node_workers', 'gauge', 'Worker processes on a node.');
  for (const n of input.nodes) sample('rtjob_node_workers', { node_id: n.nodeId }, n.workers);

  family('rtjob_actors', 'gauge', 'Actors by state.');
  const byState: Record<string, number> = { PENDING: 0, ALIVE: 0, RESTARTING: 0, DEAD: 0 };
  for (const a of input.actors) byState[a.state] = (byState[a.state] ?? 0) + 1;
  for (const [state, v] of Object.entries(byState)) sample('rtjob_actors', { state }, v);

  family('rtjob_jobs', 'gauge', 'Jobs by status.');
  const byStatus: Record<string, number> = {
    PENDING: 0,
    RUNNING: 0,
    SUCCEEDED: 0,
    FAILED: 0,
    STOPPED: 0,
  };
  for (const j of input.jobs) byStatus[j.status] = (byStatus[j.status] ?? 0) + 1;
  for (const [status, v] of Object.entries(byStatus)) sample('rtjob_jobs', { status }, v);

  if (input.callsTotal !== undefined) {
    family('rtjob_actor_calls_total', 'counter', 'Actor calls served by the cluster.');
    sample('rtjob_actor_calls_total', {}, input.callsTotal);
  }

  family('rtjob_job_metric', 'gauge', 'Latest value of each metric a running job logs.');
  for (const m of input.jobMetrics)
    sample('rtjob_job_metric', { job_id: m.jobId, name: m.name }, m.value);
  family('rtjob_job_metric_step', 'gauge', 'Step of the latest logged value.');
  for (const m of input.jobMetrics)
    sample('rtjob_job_metric_step', { job_id: m.jobId, name: m.name }, m.step);
  return out.join('\n') + '\n';
}
