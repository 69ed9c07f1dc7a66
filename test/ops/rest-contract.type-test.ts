// Compile-time checks of the REST contract: `tsc --noEmit` fails when an expected error below
// stops being one, so a caller that disagrees with the contract cannot build. Never run, only
// type-checked.
import type { RestClient } from '../../ops/http/contract.ts';

export async function callers(api: RestClient): Promise<void> {
  const job = await api.call('GET /api/jobs/:jobId', { params: { jobId: 'j' } });
  const status: 'PENDING' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'STOPPED' = job.status;
  void status;
  // @ts-expect-error a reply field that does not exist
  void job.state;
  // @ts-expect-error path parameters are required
  await api.call('GET /api/jobs/:jobId');
  // @ts-expect-error a parameter of another name
  await api.call('GET /api/jobs/:jobId', { params: { id: 'j' } });
  // @ts-expect-error a query the route does not take
  await api.call('GET /api/jobs', { query: { offset: 1 } });
  await api.call('POST /api/actors/:actorId/kill', {
    params: { actorId: 'a' },
    // @ts-expect-error a body field of the wrong type
    body: { noRestart: 'yes' },
  });
  // @ts-expect-error a route that is not in the contract
  await api.call('GET /api/jobz');
  const csv: string = await api.call('GET /api/jobs/:jobId/metrics.csv', {
    params: { jobId: 'j' },
  });
  void csv;
}
