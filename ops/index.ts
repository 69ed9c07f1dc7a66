/**
 * The operator plane's face: what the CLI (and the package, `index.ts` at the root) use of jobs,
 * the HTTP API and its typed client, logs and the dashboard. The plane builds on the actor
 * runtime and the runtime knows nothing of it (`test/conventions/layering.test.ts`).
 *
 * Loading this module stays light: the head's server, its routes and the dashboard load only when
 * a head starts ({@link startClusterHead}) or a session's history is served ({@link sessionServer}).
 *
 * @module
 */
export {
  type ClusterHead,
  type ClusterHeadOptions,
  sessionToken,
  startClusterHead,
} from './cluster-head.ts';
export {
  fetchTransport,
  logTailPath,
  type MetricsTable,
  RestError,
  restClient,
  type ProcessView,
  type QueryOf,
  type RestClient,
  type RouteKey,
  type SampleView,
} from './http/contract.ts';
export { isLoopback } from './http/auth.ts';
export { type Diagnosis, formatDiagnosis, type NoDiagnosis } from './diagnose.ts';
export { tsxImport } from './jobs/entrypoint.ts';
export { OpsStore } from './jobs/ops-store.ts';
export { stopOrphanDrivers } from './jobs/supervisor.ts';
export { tailLines } from './logs/log-file.ts';

/** The read-only server over a session's saved history (`rtjob dashboard`, `rtjob jobs` after a stop), loaded on demand. */
export const sessionServer = (): Promise<typeof import('./http/session-server.ts')> =>
  import('./http/session-server.ts');
