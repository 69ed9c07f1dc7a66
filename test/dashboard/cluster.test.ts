// The cluster view in Debian's Chromium on a live cluster: each node's CPU and memory in use (as
// its agent samples them) next to its reservations, and a row per process (the head, each job's
// driver, the agent, and each worker with its actor, CPU and resident memory), where a busy worker
// and a busy driver show their CPU; a job's Actors tab shows each actor's CPU and memory, live.
// At 420 px neither page scrolls sideways. Screenshots go to test/dashboard/screenshots/.
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Browser } from 'playwright-core';
import { launchChromium } from './browser.ts';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { defineActor, get, init, kill, shutdown } from '../../runtime/index.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { apiCall, Sandbox, until } from '../cli/helpers.ts';

const shots = fileURLToPath(new URL('./screenshots/', import.meta.url));
const CounterActor = defineActor<typeof Counter>(
  new URL('../fixtures/runtime/counter.ts', import.meta.url),
  'Counter',
);
const busyDriver = fileURLToPath(new URL('../ops/fixtures/busy-driver.ts', import.meta.url));
const sb = new Sandbox();
let browser: Browser;

test.before(async () => {
  mkdirSync(shots, { recursive: true });
  await sb.startHead();
  const { address, token } = sb.clusterFile();
  await init({ address, token });
  browser = await launchChromium();
});
test.after(async () => {
  await browser?.close();
  await shutdown();
  await sb.cleanup();
});

interface Proc {
  pid: number;
  kind: string;
  actorId: string | null;
  className: string | null;
  jobId: string | null;
  cpuPercent: number | null;
  rssBytes: number | null;
}

test('a busy worker shows its CPU and memory, per node and per process', async () => {
  const busy = CounterActor.options({ name: 'busy' }).remote();
  const idle = CounterActor.options({ name: 'idle' }).remote();
  const [busyPid, idlePid] = await get([busy.pid.remote(), idle.pid.remote()]);
  const spinning = busy.spin.remote(60_000);

  // The REST API: the node's machine figures and the busy worker's CPU, as sampled.
  const node = await until(
    'the busy worker to show CPU in /api/nodes',
    async () => {
      const { body } = await apiCall<{
        nodes: { cpuPercent: number | null; cpuCount: number; processes: Proc[] }[];
      }>(sb, 'GET', '/api/nodes');
      const n = body.nodes[0];
      const p = n?.processes.find((x) => x.pid === busyPid);
      return p && (p.cpuPercent ?? 0) > 5 ? n : undefined;
    },
    30_000,
  );
  assert.ok(node.cpuPercent !== null && node.cpuPercent > 0 && node.cpuPercent <= 100);
  const worker = node.processes.find((p) => p.pid === busyPid)!;
  assert.is(worker.className, 'Counter');
  assert.ok(worker.rssBytes! > 10 * 2 ** 20, `RSS ${worker.rssBytes}`);
  assert.ok(node.processes.some((p) => p.kind === 'agent'));
  assert.ok(node.processes.some((p) => p.pid === idlePid));

  // The page: "In use" bars per node, and the processes table.
  const { dashboardUrl, token } = sb.clusterFile();
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${dashboardUrl}/login?token=${encodeURIComponent(token)}`);
  await page.waitForSelector('table.nodes tbody tr[data-node]');
  await page.waitForFunction(
    () =>
      /CPU\s*\d+% of \d+ cores/.test(
        document.querySelector('table.nodes td.usage')?.textContent ?? '',
      ),
    undefined,
    { timeout: 15_000 },
  );
  assert.match(
    await page.locator('table.nodes td.usage').first().innerText(),
    /Memory\s*[\d.]+ [KMGT]iB \/ [\d.]+ [KMGT]iB/,
  );
  const row = page.locator(`table.processes tr[data-pid="${busyPid}"]`);
  await row.waitFor();
  assert.match(await row.innerText(), /busy \(Counter\)/);
  // The table refreshes every few seconds; the busy worker keeps a figure above 0.
  await page.waitForFunction(
    (pid) => {
      const cpu = document.querySelector(`table.processes tr[data-pid="${pid}"] td.cpu`);
      return parseFloat(cpu?.textContent ?? '') > 5;
    },
    busyPid,
    { timeout: 15_000 },
  );
  assert.match(await row.locator('td.rss').innerText(), /^[\d.]+ [KMG]iB$/);
  assert.match(
    await page.locator('table.processes tr[data-kind="agent"]').first().innerText(),
    /node agent/,
  );
  await page.screenshot({ path: `${shots}cluster-usage.png`, fullPage: true });

  // 420 px: the page never scrolls sideways; the tables scroll inside their box.
  await page.setViewportSize({ width: 420, height: 900 });
  await page.waitForSelector('table.processes');
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(wide <= 420, `the cluster view is ${wide} px wide`);
  await page.screenshot({ path: `${shots}cluster-narrow.png`, fullPage: true });
  assert.equal(errors, []);
  await context.close();

  await kill(busy);
  await kill(idle);
  await spinning.then(
    () => undefined,
    () => undefined,
  );
});

test('the head, a job’s driver and the job’s actors show their CPU and memory', async () => {
  const jobId = 'busy';
  const r = await sb.run(['submit', '--no-wait', '--job-id', jobId, '--', busyDriver]);
  assert.is(r.code, 0, r.stderr);
  const { dashboardUrl, token, headPid } = sb.clusterFile();

  // The REST API: the head's node lists the head process and the job's driver, sampled.
  const procs = await until(
    'the busy driver to show CPU in /api/nodes',
    async () => {
      const { body } = await apiCall<{ nodes: { isHead: boolean; processes: Proc[] }[] }>(
        sb,
        'GET',
        '/api/nodes',
      );
      const n = body.nodes.find((x) => x.isHead);
      const d = n?.processes.find((p) => p.kind === 'driver' && p.jobId === jobId);
      return d && (d.cpuPercent ?? 0) > 5 ? n!.processes : undefined;
    },
    60_000,
  );
  const head = procs.find((p) => p.kind === 'head')!;
  assert.is(head.pid, headPid);
  assert.ok(head.cpuPercent !== null, 'the head has a CPU figure');
  assert.ok(head.rssBytes! > 10 * 2 ** 20, `head RSS ${head.rssBytes}`);
  const driver = procs.find((p) => p.kind === 'driver')!;
  assert.ok(driver.rssBytes! > 10 * 2 ** 20, `driver RSS ${driver.rssBytes}`);
  assert.ok(
    procs.some((p) => p.kind === 'agent'),
    'the node agent keeps its own row',
  );
  // The job's actors carry their worker's figures.
  const spinner = await until(
    'the job’s spinner actor to show CPU',
    async () => {
      const { body } = await apiCall<{
        rows: { actorId: string; name: string | null; cpuPercent: number | null }[];
      }>(sb, 'GET', `/api/jobs/${jobId}/actors`);
      const a = body.rows.find((x) => x.name === 'spinner');
      return a && (a.cpuPercent ?? 0) > 5 ? a : undefined;
    },
    30_000,
  );

  // The cluster view: a row for the head and one for the driver, linked to its job.
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${dashboardUrl}/login?token=${encodeURIComponent(token)}`);
  const headRow = page.locator('table.processes tr[data-kind="head"]');
  await headRow.waitFor();
  assert.match(await headRow.innerText(), /^head\b/);
  assert.match(await headRow.locator('td.rss').innerText(), /^[\d.]+ [KMG]iB$/);
  assert.is(await headRow.getAttribute('data-pid'), String(headPid));
  const driverRow = page.locator('table.processes tr[data-kind="driver"]');
  await driverRow.waitFor();
  assert.match(await driverRow.innerText(), new RegExp(`driver of ${jobId}`));
  assert.is(await driverRow.locator(`a[href="#/jobs/${jobId}"]`).count(), 2, 'actor and job cells');
  await page.waitForFunction(
    () =>
      parseFloat(
        document.querySelector('table.processes tr[data-kind="driver"] td.cpu')?.textContent ?? '',
      ) > 5,
    undefined,
    { timeout: 15_000 },
  );
  assert.match(await driverRow.locator('td.rss').innerText(), /^[\d.]+ [KMG]iB$/);
  await page.screenshot({ path: `${shots}cluster-head-driver.png`, fullPage: true });

  // The job's Actors tab: the driver's and the spinner's CPU and memory, refreshed while the tab
  // is open.
  await page.goto(`${dashboardUrl}/#/jobs/${jobId}/actors`);
  const row = page.locator(`table.role-actors tr[data-actor="${spinner.actorId}"]`);
  await row.waitFor();
  assert.match(await row.innerText(), /spinner/);
  const cpuOf = (sel: string) =>
    page.waitForFunction(
      (s) => {
        const cpu = parseFloat(document.querySelector(s)?.textContent ?? '');
        return cpu > 5 ? document.querySelector(s)!.textContent : undefined;
      },
      sel,
      { timeout: 15_000 },
    );
  const cpuCell = `table.role-actors tr[data-actor="${spinner.actorId}"] td.cpu`;
  const first = await (await cpuOf(cpuCell)).jsonValue();
  assert.match(await row.locator('td.rss').innerText(), /^[\d.]+ [KMG]iB$/);
  // The job's driver heads the tab with its own figures.
  assert.match(
    await page.locator('#job-driver').innerText(),
    /^Driver [\d.]+% CPU, [\d.]+ [KMG]iB/,
  );
  await page.waitForFunction(
    ([s, was]) => document.querySelector(s!)?.textContent !== was,
    [cpuCell, first],
    { timeout: 15_000 },
  );
  await page.screenshot({ path: `${shots}job-actors-usage.png`, fullPage: true });

  // 420 px: the Actors tab scrolls its tables inside their box, never the page.
  await page.setViewportSize({ width: 420, height: 900 });
  await row.waitFor();
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(wide <= 420, `the job's Actors tab is ${wide} px wide`);
  await page.screenshot({ path: `${shots}job-actors-narrow.png`, fullPage: true });
  assert.equal(errors, []);
  await context.close();

  const stopped = await sb.run(['stop-job', jobId]);
  assert.is(stopped.code, 0, stopped.stderr);
});

test.run();
