/**
 * `rtjob diagnose JOB`: which side limits a `train_ppo` run, by how much, and the one setting to
 * change first, as the head judges it from the metrics and settings the job logged
 * (`ops/diagnose.ts`; the dashboard's job page shows the same verdict).
 *
 * @module
 */
import { formatDiagnosis } from '../../ops/index.ts';
import { CliError, headApi } from '../client.ts';
import { reading, type ReadOptions } from './jobs.ts';

/** `rtjob diagnose JOB [--json]`. */
export async function diagnoseCommand(
  jobId: string,
  o: ReadOptions & { json?: boolean },
): Promise<void> {
  await reading(o, async (ep) => {
    const d = await headApi(ep).call('GET /api/jobs/:jobId/diagnosis', { params: { jobId } });
    if ('reason' in d) throw new CliError(`job ${jobId}: nothing to judge: ${d.reason}`);
    console.log(o.json ? JSON.stringify(d, null, 2) : formatDiagnosis(jobId, d));
  });
}
