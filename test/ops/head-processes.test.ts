// The head and job drivers in the cluster's process list, through the typed REST client: a head
// that runs its node agent in its own process (`rtjob submit`'s private cluster) is one `head` row,
// never a second `agent` row of the same pid; a running job's driver is a `driver` row naming its
// job, gone as soon as the job is stopped.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { fetchTransport, restClient } from '../../ops/http/contract.ts';
import { type ClusterHead, startClusterHead } from '../../ops/cluster-head.ts';
import { until } from '../cli/helpers.ts';

const dir = mkdtempSync(join(tmpdir(), 'rtjob-head-procs-'));
let cluster: ClusterHead;
let api: ReturnType<typeof restClient>;

test.before(async () => {
  cluster = await startClusterHead({ sessionDir: dir, port: 0, dashboardPort: 0, numCpus: 1 });
  api = restClient(
    fetchTransport(cluster.dashboardUrl, { authorization: `Bearer ${cluster.token}` }),
  );
});
test.after(async () => {
  await cluster?.close({ stopJobs: true });
  rmSync(dir, { recursive: true, force: true });
});

const headProcesses = async () =>
  (await api.call('GET /api/nodes')).nodes.find((n) => n.isHead)?.processes ?? [];

test('a head with its node agent in-process is listed once, as the head', async () => {
  // The agent's own sample arrives within its first interval; both samplers have run by then.
  const procs = await until('the node agent’s first sample', async () => {
    const p = await headProcesses();
    return p.length > 0 && cluster.head.listNodes()[0]?.usage ? p : undefined;
  });
  const mine = procs.filter((p) => p.pid === process.pid);
  assert.equal(
    mine.map((p) => p.kind),
    ['head'],
  );
  assert.ok(mine[0]!.rssBytes! > 0);
  assert.not.ok(procs.some((p) => p.kind === 'agent'));
});

test('a running job’s driver is listed with its job until it stops', async () => {
  const job = cluster.ops.jobs.submit({ entrypoint: 'sleep 60', jobId: 'sleepy' });
  const driver = await until('the driver’s row', async () =>
    (await headProcesses()).find((p) => p.kind === 'driver' && p.jobId === job.jobId),
  );
  assert.is(driver.pid, cluster.ops.jobs.get(job.jobId).driverPid);
  assert.ok(driver.rssBytes! > 0, 'the wrapper and its sleep have memory');
  await cluster.ops.jobs.stop(job.jobId);
  assert.not.ok(
    (await headProcesses()).some((p) => p.kind === 'driver'),
    'a stopped driver leaves the list at once, not at the next sample',
  );
});

test.run();
