/**
 * `rtjob ledger JOB`: the job's ledger (train_ppo: every episode sampled, trained in which step,
 * or dropped with a reason) as its verdict and counts; `--json` gives one object whose list, named
 * as the job names its entries (`episodes`), holds each entry's `id`, `status`, `step`, `reason`
 * and the rest, for a user's own audit.
 *
 * @module
 */
import { CliError, headApi } from '../client.ts';
import { table } from '../format.ts';
import { reading, type ReadOptions } from './jobs.ts';

/** `rtjob ledger JOB [--json]`. */
export async function ledgerCommand(
  jobId: string,
  o: ReadOptions & { json?: boolean },
): Promise<void> {
  const [job, page] = await reading(o, (ep) =>
    Promise.all([
      headApi(ep).call('GET /api/jobs/:jobId', { params: { jobId } }),
      headApi(ep).call('GET /api/jobs/:jobId/ledger', { params: { jobId }, query: {} }),
    ]),
  );
  const l = job.report.ledger;
  const noun = l?.noun ?? 'entries';
  if (o.json) {
    console.log(
      JSON.stringify({
        jobId,
        verdict: l?.verdict ?? null,
        ok: l?.ok ?? null,
        [noun]: page.entries,
      }),
    );
    return;
  }
  if (!l && page.entries.length === 0)
    throw new CliError(`job ${jobId} keeps no ledger (train_ppo keeps one of its episodes)`);
  const by = new Map<string, number>();
  for (const e of page.entries) {
    const k = e.status === 'dropped' ? `dropped: ${String(e['reason'] ?? '?')}` : e.status;
    by.set(k, (by.get(k) ?? 0) + 1);
  }
  console.log(`job ${jobId}: ${l?.verdict ?? `${page.entries.length} ${noun}`}`);
  console.log(
    table(
      ['status', noun],
      [...by].sort().map(([k, n]) => [k, String(n)]),
    ),
  );
  if (l && !l.ok) process.exitCode = 1;
}
