/**
 * The `rtjob` package: the actor runtime's API (`runtime/index.ts`) and the metrics logger a job
 * reports through to the operator plane (`ops/metrics.ts`). `rtjob/agent`, `rtjob/algorithms`,
 * `rtjob/rewards` and `rtjob/roles` are the other faces (package.json `exports`).
 *
 * @module
 */
export * from './runtime/index.ts';
export { createMetricsLogger, metrics } from './ops/metrics.ts';
export type {
  MetricsLogger,
  MetricsLoggerOptions,
  MetricValues,
  SampleRecord,
} from './ops/metrics.ts';
