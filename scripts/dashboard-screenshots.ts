/**
 * Takes the README's dashboard screenshots from a real run: serves a finished session read-only
 * (as `rtjob dashboard` does) and photographs a job's page, its Samples tab and its Config tab in
 * Debian's Chromium.
 *
 *   node --import tsx scripts/dashboard-screenshots.ts SESSION_DIR JOB_ID [OUT_DIR=docs]
 *
 * @module
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

import { chromium } from 'playwright-core';

import { serveSession } from '../runtime/head/http/session-server.ts';

const [sessionDir, jobId, outDir = 'docs'] = process.argv.slice(2);
if (!sessionDir || !jobId) {
  process.stderr.write('usage: dashboard-screenshots.ts SESSION_DIR JOB_ID [OUT_DIR]\n');
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });
const server = await serveSession({ sessionDir });
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1150 } });
  await page.goto(`${server.url}/login?token=${encodeURIComponent(server.token)}`);
  // The banner says "read-only"; the pictures show the run, so it is left out.
  await page.addStyleTag({ content: '#read-only { display: none }' });
  const job = `#/jobs/${encodeURIComponent(jobId)}`;
  await page.goto(`${server.url}/${job}`);
  await page.waitForSelector('figure.chart[data-metric="reward_mean"] canvas');
  await page.addStyleTag({ content: '#read-only { display: none }' });
  await page.screenshot({ path: join(outDir, 'dashboard-job.png') });
  await page.click('#tab-samples');
  await page.waitForSelector('article.sample');
  await page.screenshot({ path: join(outDir, 'dashboard-samples.png') });
  process.stdout.write(
    `wrote ${outDir}/dashboard-job.png and dashboard-samples.png from ${sessionDir}\n`,
  );
} finally {
  await browser.close();
  await server.close();
}
