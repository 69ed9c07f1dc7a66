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

// The runtime's operator-side helpers the CLI shares with this plane: where a cluster's file and
// home are, process liveness, sizes and durations and a job's failure as text, working
// directories packed for a job, agent traces as lines, the package's own files and the
// environment. The CLI takes them from this face, never from the runtime's files
// (`test/conventions/layering.test.ts`).
export { traceLines } from '../runtime/agent-trace.ts';
export {
  type ClusterFile,
  clusterFilePath,
  readClusterFile,
  removeClusterFile,
  rtjobHome,
  writeClusterFile,
} from '../runtime/cluster-file.ts';
export { readEnv } from '../runtime/env.ts';
export {
  bytes,
  duration,
  failureReason,
  headlineText,
  parseBytes,
  stopAdvice,
} from '../runtime/format.ts';
export { typescriptNodeFlags } from '../runtime/node/worker-env.ts';
export { ownModuleNodeFlags, ownModulePath, packageRoot } from '../runtime/own-files.ts';
export {
  defaultMaxPackageBytes,
  PackageTooLargeError,
  packDir,
} from '../runtime/packages/working-dir.ts';
export { pidAlive } from '../runtime/pid.ts';

/** The read-only server over a session's saved history (`rtjob dashboard`, `rtjob jobs` after a stop), loaded on demand. */
export const sessionServer = (): Promise<typeof import('./http/session-server.ts')> =>
  import('./http/session-server.ts');
