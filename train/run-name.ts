/**
 * The name of a driver's run when the user gives none: its output folder under `ckpt/` and its
 * name in the experiment trackers.
 *
 * @module
 */
import { readEnv } from '../runtime/env.ts';

/**
 * The name of this run's own output folder: the job id under a cluster, else the start time
 * (`run-20261123-203512`), so no run writes over another's policy by default.
 */
export function runName(
  env: Record<string, string | undefined> = process.env,
  now = new Date(),
): string {
  const job = readEnv('RTJOB_JOB_ID', env);
  if (job && /^[\w.-]+$/.test(job)) return job;
  const p = (n: number) => String(n).padStart(2, '0');
  return `run-${now.getFullYear()}${p(now.getMonth() + 1)}${p(now.getDate())}-${p(now.getHours())}${p(now.getMinutes())}${p(now.getSeconds())}`;
}
