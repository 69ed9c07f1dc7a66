// The cluster view in Debian's Chromium on a live cluster: each node's CPU and memory in use (as
// its agent samples them) next to its reservations, and a row per process (the agent, and each
// worker with its actor, CPU and resident memory), where a busy worker shows its CPU. At 420 px
// the page never scrolls sideways. Screenshots go to test/dashboard/screenshots/.
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type Browser, chromium } from 'playwright-core';
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
const sb = new Sandbox();
let browser: Browser;

test.before(async () => {
  mkdirSync(shots, { recursive: true });
  await sb.startHead();
  const { address, token } = sb.clusterFile();
  await init({ address, token });
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
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

test.run();
