/**
 * One run history over several finished sessions: the job stores of every session on a machine
 * (`~/.rtjob/session` and each embedded run's `~/.rtjob/runs/*`) read as one, as TensorBoard reads
 * a `--logdir` of runs. Jobs are listed newest first across all of them; a call about one job goes
 * to the session that holds it (the newest, should two hold the same id). Read-only use: `rtjob
 * list | logs | metrics | samples | dashboard` with no cluster running.
 *
 * @module
 */
import type { ClusterEvent, JobInfo, JobProgress, LogFile, OpsStore } from './ops-store.ts';
import { OpsError } from './errors.ts';

/** Methods whose first argument is a job id: answered by the session that holds that job. */
const perJob = new Set<PropertyKey>(['getJob', 'metricsTable', 'report', 'sampleSteps', 'samples']);

/**
 * `stores`, newest session first, as one {@link OpsStore} for reading. Writes go to the newest
 * (a read-only server refuses them before they get here).
 */
export function historyStore(stores: readonly OpsStore[]): OpsStore {
  const [newest] = stores;
  if (!newest) throw new OpsError('BAD_REQUEST', 'historyStore needs at least one store');
  if (stores.length === 1) return newest;
  const owner = (jobId: string): OpsStore =>
    stores.find((s) => s.getJob(jobId) !== undefined) ?? newest;
  const merged: Partial<Record<keyof OpsStore, unknown>> = {
    listJobs: (opts: { status?: JobInfo['status'][]; limit?: number } = {}): JobInfo[] => {
      const seen = new Set<string>();
      return stores
        .flatMap((s) => s.listJobs(opts.status ? { status: opts.status } : {}))
        .filter((j) => !seen.has(j.jobId) && seen.add(j.jobId))
        .sort((a, b) => b.submittedAt - a.submittedAt)
        .slice(0, opts.limit !== undefined && opts.limit >= 0 ? opts.limit : undefined);
    },
    progress: (
      jobIds: readonly string[],
      running?: ReadonlySet<string>,
    ): Map<string, JobProgress> => {
      const out = new Map<string, JobProgress>();
      for (const id of jobIds)
        for (const [k, v] of owner(id).progress([id], running)) out.set(k, v);
      return out;
    },
    latestMetrics: (jobIds: readonly string[]) =>
      jobIds.flatMap((id) => owner(id).latestMetrics([id])),
    listEvents: (opts: { subject?: string; limit?: number } = {}): ClusterEvent[] =>
      stores
        .flatMap((s) => s.listEvents(opts))
        .sort((a, b) => b.time - a.time)
        .slice(0, opts.limit ?? 200),
    findLogFiles: (query: { jobId?: string; actorId?: string }): LogFile[] =>
      query.jobId
        ? owner(query.jobId).findLogFiles(query)
        : stores.flatMap((s) => s.findLogFiles(query)),
  };
  return new Proxy(newest, {
    get(target, prop, receiver) {
      if (prop in merged) return merged[prop as keyof OpsStore];
      if (perJob.has(prop))
        return (jobId: string, ...rest: unknown[]) =>
          (owner(jobId)[prop as 'report'] as (...a: unknown[]) => unknown).call(
            owner(jobId),
            jobId,
            ...rest,
          );
      const v: unknown = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}
