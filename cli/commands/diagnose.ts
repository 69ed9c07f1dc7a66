/**
 * `rtjob diagnose JOB`: which side limits a `train_ppo` run, by how much, and the one setting to
 * change first, from the metrics and settings the job logged (`train/ppo/diagnose.ts` judges).
 *
 * @module
 */
import { diagnose, formatDiagnosis, type MetricRow } from '../../train/ppo/diagnose.ts';
import { CliError, headApi } from '../client.ts';
import { jobMetrics, reading, type ReadOptions } from './jobs.ts';

/** `rtjob diagnose JOB [--json]`. */
export async function diagnoseCommand(
  jobId: string,
  o: ReadOptions & { json?: boolean },
): Promise<void> {
  await reading(o, async (ep) => {
    const [t, report] = await Promise.all([
      jobMetrics(ep, jobId),
      headApi(ep).call('GET /api/jobs/:jobId/report', { params: { jobId } }),
    ]);
    const step = t.columns.indexOf('step');
    const rows: MetricRow[] = t.rows.map((r) => ({
      step: Number(r[step]),
      values: Object.fromEntries(t.columns.map((c, i) => [c, r[i]])),
    }));
    const settings = Object.fromEntries(
      (report.config ?? []).map((c) => [c.name.replace(/^--/, ''), c.value]),
    );
    const d = diagnose(rows, settings);
    if ('reason' in d) throw new CliError(`job ${jobId}: nothing to judge: ${d.reason}`);
    console.log(o.json ? JSON.stringify(d, null, 2) : formatDiagnosis(jobId, d));
  });
}
