/**
 * The dashboard's calls to the head: the typed REST contract (`ops/http/contract.ts`,
 * the same one the server implements and the CLI calls) over `fetch` with the login cookie, and
 * one EventSource for live updates.
 *
 * @module
 */
import { eventsPath, fetchTransport, restClient } from '../../http/contract.ts';

import type { JobInfo as JobRecord, JobProgress, JobReport } from '../../http/contract.ts';
export type { SampleView } from '../../http/contract.ts';

export type {
  ActorPage,
  ActorPageQuery,
  ActorSortKey,
  ActorView,
  ChartLayout,
  ClusterStatus,
  ConfigRow,
  JobProgress,
  JobReport,
  MetricsEvent,
  MetricsTable,
  NodeView,
  ProcessView,
  SamplesPage,
} from '../../http/contract.ts';

/** A job as the list (with its progress) or its own page (also with its report) shows it. */
export type JobInfo = JobRecord & { progress?: JobProgress; report?: JobReport };

export { logTailPath, RestError } from '../../http/contract.ts';

/**
 * The head's API: `await api.call('GET /api/jobs/:jobId', { params: { jobId } })`. A non-2xx
 * answer throws `RestError` with the API's message and code.
 */
export const api = restClient(fetchTransport('', {}, { credentials: 'same-origin' }));

type Listener = (event: string, data: unknown) => void;
const listeners = new Set<Listener>();

/** Subscribes to live events (`job`, `metrics`, `cluster`); returns an unsubscribe function. */
export function onLive(fn: Listener): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** Opens the event stream; `status` reports connected/reconnecting for the header. */
export function connectLive(status: (connected: boolean) => void): void {
  const es = new EventSource(eventsPath);
  es.onopen = () => status(true);
  es.onerror = () => status(false);
  for (const name of ['job', 'metrics', 'cluster']) {
    es.addEventListener(name, (e) => {
      const data = JSON.parse((e as MessageEvent<string>).data) as unknown;
      for (const l of listeners) l(name, data);
    });
  }
}
