/**
 * How long a stop waits between SIGTERM and SIGKILL: the supervisor's grace, or longer where the
 * job's report asks for it (`stopGraceMs`: a driver that saves a checkpoint on notice), at most
 * {@link maxStopGraceMs}.
 *
 * @module
 */
import type { JobReport } from './ops-store.ts';

/** The longest grace a job may ask for. */
export const maxStopGraceMs = 600_000;

/** The grace of a stop of a job that reported `report`, the supervisor's being `defaultMs`. */
export function stopGraceMs(report: JobReport, defaultMs: number): number {
  const asked = Number(report.stopGraceMs);
  return Number.isFinite(asked) ? Math.max(defaultMs, Math.min(asked, maxStopGraceMs)) : defaultMs;
}
