/**
 * Takes the README's dashboard screenshots from a real run, in Debian's Chromium.
 *
 * A finished run: serves its session read-only (as `rtjob dashboard` does) and photographs the
 * job's page, its Samples tab and its Config tab:
 *
 *   node --import tsx scripts/dashboard-screenshots.ts SESSION_DIR JOB_ID [OUT_DIR=docs]
 *
 * A running one: logs in to the running cluster's dashboard (`~/.rtjob/cluster.json`) and
 * photographs the cluster view once a worker of the job shows CPU in use and its driver a figure:
 *
 *   node --import tsx scripts/dashboard-screenshots.ts --cluster JOB_ID [OUT_DIR=docs]
 *
 * @module
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

import { type Browser, chromium } from 'playwright-core';

import { readClusterFile } from '../runtime/cluster-file.ts';
import { serveSession } from '../ops/http/session-server.ts';

const args = process.argv.slice(2);
const cluster = args[0] === '--cluster';
// `--cluster JOB [OUT]` or `SESSION_DIR JOB [OUT]`: the job and the folder are at the same places.
const [sessionDir, jobId, outDir = 'docs'] = args;
if (!sessionDir || !jobId) {
  process.stderr.write(
    'usage: dashboard-screenshots.ts SESSION_DIR JOB_ID [OUT_DIR]\n' +
      '       dashboard-screenshots.ts --cluster JOB_ID [OUT_DIR]\n',
  );
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu'],
});
try {
  if (cluster) await clusterShot(browser, jobId);
  else await finishedShots(browser, sessionDir, jobId);
} finally {
  await browser.close();
}

async function finishedShots(b: Browser, dir: string, job: string): Promise<void> {
  const server = await serveSession({ sessionDir: dir });
  try {
    const page = await b.newPage({ viewport: { width: 1400, height: 1150 } });
    await page.goto(`${server.url}/login?token=${encodeURIComponent(server.token)}`);
    // The banner says "read-only"; the pictures show the run, so it is left out.
    await page.addStyleTag({ content: '#read-only { display: none }' });
    await page.goto(`${server.url}/#/jobs/${encodeURIComponent(job)}`);
    await page.waitForSelector('figure.chart[data-metric="reward_mean"] canvas');
    await page.addStyleTag({ content: '#read-only { display: none }' });
    await page.screenshot({ path: join(outDir, 'dashboard-job.png') });
    await page.click('#tab-samples');
    await page.waitForSelector('article.sample');
    await page.screenshot({ path: join(outDir, 'dashboard-samples.png') });
    process.stdout.write(
      `wrote ${outDir}/dashboard-job.png and dashboard-samples.png from ${dir}\n`,
    );
  } finally {
    await server.close();
  }
}

async function clusterShot(b: Browser, job: string): Promise<void> {
  const info = readClusterFile({ live: true });
  if (!info?.dashboardUrl) throw new Error('no cluster with a dashboard is running');
  const page = await b.newPage({ viewport: { width: 1400, height: 760 } });
  await page.goto(`${info.dashboardUrl}/login?token=${encodeURIComponent(info.token)}`);
  // A worker of the job with CPU in use, and the job's driver with a CPU figure (the table
  // refreshes every few seconds).
  await page.waitForFunction(
    // No named helpers inside: tsx wraps those in a `__name` call the page does not have.
    (id) =>
      ['worker', 'driver'].every((kind) =>
        Array.from(document.querySelectorAll(`table.processes tr[data-kind="${kind}"]`)).some(
          (tr) =>
            tr.querySelector(`a[href="#/jobs/${id}"]`) &&
            parseFloat(tr.querySelector('td.cpu')?.textContent ?? '') >
              (kind === 'worker' ? 1 : -1),
        ),
      ),
    encodeURIComponent(job),
    { timeout: 300_000 },
  );
  await page.screenshot({ path: join(outDir, 'dashboard-cluster.png') });
  process.stdout.write(`wrote ${outDir}/dashboard-cluster.png while job ${job} ran\n`);
}
