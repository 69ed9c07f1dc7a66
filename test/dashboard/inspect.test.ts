// Inspecting real train_ppo runs in Debian's Chromium: a live job's page (progress, charts that
// follow every step, on a tokens axis too, samples as they arrive, config) and the cluster view
// with its workers busy, then, with the cluster stopped, the finished session served read-only
// by `rtjob dashboard`: jobs list with progress and headline, a job's summary, Samples (step
// slider, reward filter, one prompt over time), Config (defaults marked), compare with a config
// diff, the tokens axis, the controls disabled, and tables that scroll inside a 420 px viewport.
// Screenshots go to test/dashboard/screenshots/.
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from './browser.ts';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { apiCall, binPath, Sandbox, until } from '../cli/helpers.ts';

const shots = fileURLToPath(new URL('./screenshots/', import.meta.url));
const agent = fileURLToPath(new URL('../../examples/agent.ts', import.meta.url));
const sb = new Sandbox();
let browser: Browser;

/** A small real run: 3 steps of 4 prompts × 4 samples on the shipped model. */
const ppo = (out: string, extra: string[] = []) => [
  'train_ppo',
  '--agent-func',
  agent,
  '--max-steps',
  '3',
  '--rollout-batch-size',
  '4',
  '--n-samples-per-prompt',
  '4',
  '--train-batch-size',
  '16',
  '--micro-train-batch-size',
  '8',
  '--eval-prompts',
  '8',
  '--save-path',
  join(sb.home, out),
  '--ckpt-path',
  join(sb.home, `${out}-ckpt`),
  ...extra,
];

test.before(async () => {
  mkdirSync(shots, { recursive: true });
  browser = await launchChromium();
});
test.after(async () => {
  await browser?.close();
  await sb.cleanup();
});

async function login(url: string, width = 1400): Promise<{ page: Page; errors: string[] }> {
  const context = await browser.newContext({ viewport: { width, height: 1000 } });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(url);
  return { page, errors };
}

/**
 * Hovers the right end of a metric's chart and reads the x legend (label and value), or
 * `undefined` when the chart is being rebuilt (live charts are, when a new metric arrives).
 */
async function hoverLastX(
  page: Page,
  metric: string,
): Promise<{ label: string; value: string } | undefined> {
  const fig = page.locator(`figure.chart[data-metric="${metric}"]`);
  const xRow = fig.locator('.u-legend tr.u-series').first();
  try {
    await fig.scrollIntoViewIfNeeded({ timeout: 1000 });
    const box = await fig.locator('.u-over').boundingBox({ timeout: 1000 });
    if (!box) return undefined;
    // Away and back: a chart rebuilt under a still cursor shows no value until the cursor moves.
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.move(box.x + box.width - 1, box.y + box.height / 2);
    return {
      label: (await xRow.locator('.u-label').innerText({ timeout: 1000 })).trim(),
      value: (await xRow.locator('.u-value').innerText({ timeout: 1000 })).trim(),
    };
  } catch {
    return undefined;
  }
}

/**
 * With the x axis on generated tokens, the reward chart's points sit at the jobs' logged
 * `tokens_total` (read from the API), not at their steps; then the axis goes back to steps.
 */
async function checkTokensAxis(page: Page, jobIds: string[]): Promise<void> {
  // A live page gets the axis once the job has logged tokens (it may have opened before).
  await page.waitForSelector('#x-axis option[value="tokens"]:not([disabled])', {
    state: 'attached',
    timeout: 60_000,
  });
  await page.selectOption('#x-axis', 'tokens');
  const x = await until('the reward chart on a tokens axis', async () => {
    const got = await hoverLastX(page, 'reward_mean');
    return got?.label === 'tokens' && /\d/.test(got.value) ? got : undefined;
  });
  const shown = Number(x.value.replace(/[^\d.]/g, ''));
  const perJob = await page.evaluate(async (ids) => {
    const out: number[][] = [];
    for (const id of ids) {
      const t = (await (await fetch(`/api/jobs/${id}/metrics`)).json()) as {
        columns: string[];
        rows: (number | null)[][];
      };
      const i = t.columns.indexOf('tokens_total');
      out.push(t.rows.map((r) => r[i]).filter((v): v is number => v !== null && v !== undefined));
    }
    return out;
  }, jobIds);
  for (const totals of perJob) {
    assert.ok(totals.length > 0, 'train_ppo logs tokens_total');
    assert.ok(
      totals.every((v, k) => k === 0 || v > totals[k - 1]!),
      `tokens_total grows every step: ${totals}`,
    );
  }
  const all = perJob.flat();
  assert.ok(all.includes(shown), `the hovered x ${shown} is one of ${all}`);
  assert.ok(shown > 16, 'x is in tokens, not steps');
  await page.selectOption('#x-axis', 'step');
  await page.waitForFunction(
    () =>
      document
        .querySelector('figure.chart[data-metric="reward_mean"] .u-legend tr.u-series .u-label')
        ?.textContent?.trim() === 'step',
  );
}

test('a live run: its page shows progress and samples as steps arrive', async () => {
  await sb.startHead();
  const r = await sb.run(['submit', '--no-wait', '--job-id', 'ppo-a', '--', ...ppo('a')]);
  assert.is(r.code, 0, r.stderr);
  const link = (await sb.run(['dashboard'])).stdout.trim();
  const { page, errors } = await login(`${link}#/jobs/ppo-a`);
  await page.waitForSelector('#sum-progress', { timeout: 120_000 });
  await page.waitForFunction(
    () => /step [123] \/ 3/.test(document.querySelector('#sum-progress')?.textContent ?? ''),
    undefined,
    { timeout: 120_000 },
  );
  // The cluster view while it trains: the job's workers, each with its CPU and memory, and at
  // least one of them busy.
  await page.click('nav a[href="#/"]');
  await page.waitForSelector('table.processes tr[data-kind="worker"] a[href="#/jobs/ppo-a"]');
  await page.waitForFunction(
    () =>
      Array.from(document.querySelectorAll('table.processes tr[data-kind="worker"]')).some(
        (tr) =>
          tr.querySelector('a[href="#/jobs/ppo-a"]') &&
          parseFloat(tr.querySelector('td.cpu')?.textContent ?? '') > 0 &&
          /\d (MiB|GiB)$/.test(tr.querySelector('td.rss')?.textContent ?? ''),
      ),
    undefined,
    { timeout: 60_000 },
  );
  assert.match(
    await page.locator('table.processes').innerText(),
    /(Trainer|Rollout)[\s\S]*%/,
    'rows name the role each worker hosts',
  );
  await page.screenshot({ path: `${shots}cluster-training.png`, fullPage: true });
  await page.locator('table.processes a[href="#/jobs/ppo-a"]').first().click();
  // Rows logged late for a step the page already has (a step's update metrics come after its
  // episode metrics) reach the live charts too.
  await page.waitForSelector('figure.chart[data-metric="reward_mean"] canvas', {
    timeout: 60_000,
  });
  await checkTokensAxis(page, ['ppo-a']);
  await page.click('#tab-samples');
  await page.waitForSelector('article.sample', { timeout: 120_000 });
  await page.waitForFunction(
    () => document.querySelector('#job-status')?.textContent === 'SUCCEEDED',
    undefined,
    { timeout: 240_000 },
  );
  await page.waitForFunction(() =>
    /step 3 \/ 3/.test(document.querySelector('#sum-progress')?.textContent ?? ''),
  );
  // The live charts got every step's update metrics, up to the last: hovering the right end of
  // the reward chart shows step 3.
  await page.click('#tab-charts');
  await until('the live reward chart to reach step 3', async () =>
    (await hoverLastX(page, 'reward_mean'))?.value === '3' ? true : undefined,
  );
  // Its config while it runs.
  await page.click('#tab-config');
  await page.waitForSelector('tr[data-setting="--max-steps"][data-source="flag"]');
  assert.equal(errors, []);
  await page.context().close();
  // A second run with other settings, to compare with; then the cluster goes away.
  const b = await sb.run(
    [
      'submit',
      '--job-id',
      'ppo-b',
      '--',
      ...ppo('b', ['--temperature', '0.7', '--log-samples', '8']),
    ],
    { timeoutMs: 300_000 },
  );
  assert.is(b.code, 0, b.stderr);
  // A missing agent file is refused before anything is submitted (bad input, exit 2); an agent
  // file that is no agent fails inside the job, which keeps its one-line reason.
  const refused = await sb.run([
    'submit',
    '--job-id',
    'ppo-missing',
    '--',
    'train_ppo',
    '--agent-func',
    join(sb.home, 'missing.ts'),
  ]);
  assert.is(refused.code, 2);
  assert.match(refused.stderr, /--agent-func: no such file/);
  const failed = await sb.run([
    'submit',
    '--job-id',
    'ppo-bad',
    '--',
    'train_ppo',
    '--agent-func',
    fileURLToPath(new URL('../fixtures/agents/no-export.ts', import.meta.url)),
  ]);
  assert.is(failed.code, 1);
  assert.is((await sb.run(['stop'])).code, 0);
});

test('the finished session, read-only: jobs, summary, samples, config, compare', async () => {
  const child = spawn(process.execPath, [binPath, 'dashboard', '--port', '0'], {
    env: { ...process.env, HOME: sb.home, RTJOB_HOME: join(sb.home, '.rtjob') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise((r) => child.on('exit', r));
  try {
    const link = await until(
      'the dashboard link',
      () =>
        new Promise<string | undefined>((resolve) => {
          child.stdout.once('data', (d: Buffer) => resolve(/(http:\/\/\S+)/.exec(String(d))?.[1]));
        }),
      60_000,
    );
    const { page, errors } = await login(link);
    await page.waitForSelector('#read-only');
    // One session here (every job ran on the one head): the banner names it.
    assert.match(
      await page.locator('#read-only').innerText(),
      new RegExp(`^Finished session ${join(sb.home, '.rtjob')}/\\S+, served read-only`),
    );

    // Jobs: progress, headline metric, and the failed job's reason on one line.
    await page.click('nav a[href="#/jobs"]');
    await page.waitForSelector('tr[data-job="ppo-a"]');
    assert.match(
      await page.locator('tr[data-job="ppo-a"]').innerText(),
      /SUCCEEDED[\s\S]*3 \/ 3[\s\S]*eval_accuracy \d+\.\d%/,
    );
    assert.match(
      await page.locator('tr[data-job="ppo-bad"] .reason').innerText(),
      /exports none of `step`/,
    );
    assert.is(await page.locator('tr[data-job="ppo-missing"]').count(), 0, 'never submitted');
    await page.screenshot({ path: `${shots}jobs-finished.png`, fullPage: true });

    // The job page: summary, then every tab.
    await page.click('tr[data-job="ppo-a"] a');
    await page.waitForSelector('#sum-eval');
    assert.match(await page.locator('#sum-progress').innerText(), /step 3 \/ 3/);
    assert.match(await page.locator('#sum-eval').innerText(), /\d+\.\d% → \d+\.\d%/);
    assert.match(await page.locator('#sum-reward').innerText(), /→/);
    assert.match(await page.locator('#sum-failures').innerText(), /0 episodes failed/);
    assert.match(
      await page.locator('#sum-outputs').innerText(),
      new RegExp(`policy\\s+${join(sb.home, 'a')}`),
    );
    assert.not.match(
      await page.locator('#sum-outputs').innerText(),
      /checkpoints/,
      'a run without --save-steps writes no checkpoints',
    );
    assert.is(
      await page.locator('#stop-job').count(),
      0,
      'a finished job has no Stop button (nothing can be stopped in a finished session)',
    );
    await page.waitForSelector('figure.chart[data-metric="reward_mean"] canvas');
    assert.match(
      await page.locator('#constant-metrics summary').innerText(),
      /never changed/,
      'flat metrics are folded',
    );
    assert.ok(
      await page.locator('#constant-metrics code[data-metric="kl"]').count(),
      'kl with coefficient 0 is folded',
    );
    await page.screenshot({ path: `${shots}job-finished.png`, fullPage: true });

    // Samples: the latest step, the slider, the reward filter, one prompt over time.
    await page.click('#tab-samples');
    await page.waitForSelector('article.sample');
    assert.match(await page.locator('#samples-title').innerText(), /Step 3: 16 samples/);
    const first = page.locator('article.sample').first();
    assert.match(await first.innerText(), /PROMPT[\s\S]*ASSISTANT/i);
    await page.screenshot({ path: `${shots}samples.png`, fullPage: false });
    await page.locator('#sample-step').fill('0');
    await page.waitForFunction(() =>
      /Step 1:/.test(document.querySelector('#samples-title')?.textContent ?? ''),
    );
    // The filter names the score as train_ppo's report does: its reward.
    assert.equal(await page.locator('#sample-score option').allInnerTexts(), [
      'any reward',
      'reward > 0',
      'reward ≤ 0',
    ]);
    await page.selectOption('#sample-score', 'pos');
    await page.waitForFunction(() =>
      Array.from(document.querySelectorAll('article.sample .score')).every(
        (r) => !/reward 0$/.test(r.textContent ?? ''),
      ),
    );
    await page.selectOption('#sample-score', '');
    const key = await page
      .locator('article.sample button[data-key]')
      .first()
      .getAttribute('data-key');
    await page.locator('article.sample button[data-key]').first().click();
    await page.waitForFunction(
      (k) =>
        (document.querySelector('#samples-title')?.textContent ?? '').startsWith(
          `Prompt #${k} over time`,
        ),
      key,
    );
    const steps = await page
      .locator('article.sample')
      .evaluateAll((els) => [...new Set(els.map((e) => e.getAttribute('data-step')))]);
    assert.ok(steps.length >= 1 && steps.every((s) => ['1', '2', '3'].includes(s!)));
    await page.click('#sample-back');
    await page.waitForFunction(() =>
      /^Step \d+:/.test(document.querySelector('#samples-title')?.textContent ?? ''),
    );

    // Config: every setting, the changed ones marked, and "only changed".
    await page.click('#tab-config');
    await page.waitForSelector('tr[data-setting="--max-steps"][data-source="flag"]');
    assert.match(
      await page.locator('tr[data-setting="--seed"]').innerText(),
      /42[\s\S]*\(default\)/,
    );
    await page.check('#only-changed');
    assert.is(await page.locator('tr[data-setting="--seed"]').count(), 0);
    await page.screenshot({ path: `${shots}config.png`, fullPage: true });

    // Compare with the second run: both lines, and the settings that differ. The failed job
    // logged no metrics, so it is not offered.
    await page.click('#tab-charts');
    await page.waitForSelector('#compare option[value="ppo-b"]', { state: 'attached' });
    assert.equal(await page.locator('#compare option').allInnerTexts(), [
      '(add a job)',
      'ppo-b (SUCCEEDED)',
    ]);
    await page.selectOption('#compare', 'ppo-b');
    await page.waitForSelector('#config-diff tr[data-setting="--temperature"]');
    assert.match(
      await page.locator('#config-diff tr[data-setting="--temperature"]').innerText(),
      /1[\s\S]*0\.7/,
    );
    assert.ok(await page.locator('#config-diff tr[data-setting="--log-samples"]').count());
    assert.is(
      await page.locator('#config-diff tr[data-setting="--seed"]').count(),
      0,
      'equal settings are not in the diff',
    );
    await page.waitForSelector('#chart-legend .key[data-job="ppo-b"]');
    // Its values float over the chart only while the pointer is on it: no empty legend row.
    const legend = page.locator('figure.chart[data-metric="reward_mean"] .u-legend');
    await legend.waitFor({ state: 'attached' });
    assert.is(await legend.evaluate((e) => getComputedStyle(e).position), 'absolute');
    assert.ok(await legend.isHidden());
    await page.locator('figure.chart[data-metric="reward_mean"] .u-over').hover();
    assert.ok(await legend.isVisible());
    await page.screenshot({ path: `${shots}compare.png`, fullPage: true });
    await checkTokensAxis(page, ['ppo-a', 'ppo-b']);

    // The failed job wrote nothing: no "Writes to", and nothing to stop.
    await page.goto(`${new URL(link).origin}/#/jobs/ppo-bad`);
    await page.waitForSelector('#job-reason');
    assert.is(await page.locator('#sum-outputs').count(), 0);
    assert.is(await page.locator('#stop-job').count(), 0);

    // Actors: Restart and Kill are off, and say why.
    await page.click('nav a[href="#/actors"]');
    await page.waitForSelector('tr[data-actor]');
    assert.ok(await page.locator('tr[data-actor] button:has-text("Restart")').first().isDisabled());
    // train_ppo's actors are named for their roles, and say that their own driver ended them.
    const ofA = page.locator('tr[data-actor]:has(a[href="#/jobs/ppo-a"])');
    assert.equal((await ofA.locator('td.name').allInnerTexts()).sort(), ['rollout-0', 'trainer']);
    for (const cause of await ofA.locator('td.cause').allInnerTexts())
      assert.match(cause, /: killed by its owner's kill\(\) call$/);

    // 420 px: the page never scrolls sideways (sample turns wrap); wide tables scroll inside
    // their box; the job summary is compact enough to leave the tabs on the first screen.
    await page.setViewportSize({ width: 420, height: 900 });
    const samples = '#/jobs/ppo-a/samples';
    for (const view of ['#/', '#/jobs', '#/actors', '#/jobs/ppo-a/config', samples]) {
      await page.goto(`${new URL(link).origin}/${view}`);
      await page.waitForSelector(view === samples ? 'article.sample' : 'main table, main .cards');
      const wide = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(wide <= 420, `${view} is ${wide} px wide`);
      if (view === samples) await page.screenshot({ path: `${shots}samples-420.png` });
    }
    // Two compact columns of cards (one card per row, ~500 px, before).
    const summary = (await page.locator('#job-summary').boundingBox())!;
    assert.ok(summary.height < 260, `the summary is ${summary.height} px high`);
    const tabs = (await page.locator('#tab-charts').boundingBox())!;
    assert.ok(tabs.y + tabs.height < 900, `the tabs are at ${tabs.y} px`);
    await page.screenshot({ path: `${shots}narrow.png`, fullPage: false });
    assert.equal(errors, []);
    await page.context().close();
  } finally {
    child.kill('SIGINT');
  }
  assert.is(await exited, 0);
});

test('the REST API gives what the page shows', async () => {
  // The session is served read-only by a second process here; read it with the CLI too.
  const r = await sb.run(['samples', 'ppo-b', '--json']);
  const page = JSON.parse(r.stdout);
  assert.equal(page.steps, [1, 2, 3]);
  assert.is(page.samples.length, 8, '--log-samples 8');
  void apiCall;
});

test.run();
