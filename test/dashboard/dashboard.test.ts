// The dashboard in Debian's Chromium: each view shows the cluster's real data, charts have points,
// and stopping a job from its page changes its state. Screenshots go to test/dashboard/screenshots/.
import { mkdirSync } from 'node:fs';
import { get as httpGet } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import type { Browser } from 'playwright-core';
import { launchChromium } from './browser.ts';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { flagConfig, parseTrainPpoArgs } from '../../train/ppo/flags.ts';
import { apiCall, Sandbox, until } from '../cli/helpers.ts';

const fixtures = fileURLToPath(new URL('../ops/fixtures/', import.meta.url));
const shots = fileURLToPath(new URL('./screenshots/', import.meta.url));
const sb = new Sandbox();
let browser: Browser;

test.before(async () => {
  mkdirSync(shots, { recursive: true });
  await sb.startHead();
  browser = await launchChromium();
});
test.after(async () => {
  await browser?.close();
  await sb.cleanup();
});

test('without the token the dashboard answers 401', async () => {
  const { dashboardUrl } = sb.clusterFile();
  const page = await browser.newPage();
  const res = await page.goto(dashboardUrl);
  assert.is(res?.status(), 401);
  await page.close();
});

test('text files are gzipped for a client that accepts it, and only then', async () => {
  const { dashboardUrl, token } = sb.clusterFile();
  const get = (encoding: string) =>
    new Promise<{ headers: Record<string, unknown>; body: Buffer }>((resolve, reject) => {
      httpGet(
        `${dashboardUrl}/app.js`,
        { headers: { authorization: `Bearer ${token}`, 'accept-encoding': encoding } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }));
        },
      ).on('error', reject);
    });
  const plain = await get('identity');
  const zipped = await get('gzip, deflate, br');
  assert.is(plain.headers['content-encoding'], undefined);
  assert.is(zipped.headers['content-encoding'], 'gzip');
  assert.is(zipped.headers.vary, 'accept-encoding');
  assert.ok(
    zipped.body.length * 2 < plain.body.length,
    `${zipped.body.length} of ${plain.body.length}`,
  );
  assert.ok(gunzipSync(zipped.body).equals(plain.body));
});

test('views show real data; a job is stopped from its page', async () => {
  const done = await sb.run([
    'submit',
    '--job-id',
    'finished',
    '--',
    fileURLToPath(new URL('log-metrics.ts', `file://${fixtures}`)),
  ]);
  assert.is(done.code, 0, done.stderr);
  const r = await sb.run([
    'submit',
    '--no-wait',
    '--job-id',
    'train1',
    '--',
    `${fixtures}train-loop.ts`,
  ]);
  assert.is(r.code, 0, r.stderr);
  await until('metrics to arrive', async () => {
    const m = await apiCall<{ rows: unknown[] }>(sb, 'GET', '/api/jobs/train1/metrics');
    return m.body.rows.length >= 20 ? true : undefined;
  });

  const { dashboardUrl, token } = sb.clusterFile();
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  // Every resource the page loads exists (a missing favicon used to log a 404), and the bundle
  // comes gzipped.
  const failed: string[] = [];
  page.on('response', (res) => {
    if (res.status() >= 400) failed.push(`${res.status()} ${res.url()}`);
  });
  page.on('console', (m) => {
    if (m.type() === 'error') failed.push(`${m.text()} ${m.location().url}`);
  });
  const bundle = page.waitForResponse((res) => new URL(res.url()).pathname === '/app.js');
  await page.goto(`${dashboardUrl}/login?token=${encodeURIComponent(token)}`);
  assert.is(await (await bundle).headerValue('content-encoding'), 'gzip');

  // Cluster: the node with resource bars.
  await page.waitForSelector('table.nodes tbody tr[data-node]');
  assert.ok((await page.locator('table.nodes .bar').count()) >= 2);
  await page.waitForSelector('#live[data-ok="true"]');
  await page.screenshot({ path: `${shots}cluster.png`, fullPage: true });

  // Jobs list.
  await page.click('nav a[href="#/jobs"]');
  await page.waitForSelector('tr[data-job="train1"]');
  assert.match(await page.locator('tr[data-job="finished"]').innerText(), /SUCCEEDED/);
  await page.screenshot({ path: `${shots}jobs.png`, fullPage: true });

  // Job page: charts with points, live log lines, config.
  await page.click('tr[data-job="train1"] a');
  await page.waitForSelector('figure.chart[data-metric="reward_mean"] canvas');
  assert.ok((await page.locator('figure.chart').count()) >= 3);
  await page.waitForFunction(() =>
    (document.querySelector('pre.log')?.textContent ?? '').includes('step 10'),
  );
  // This job logs no generated tokens: the tokens axis is off, and says why.
  const tokensOption = page.locator('#x-axis option[value="tokens"]');
  assert.ok(await tokensOption.isDisabled());
  assert.match((await tokensOption.getAttribute('title')) ?? '', /logs no tokens_total/);
  // The step time split is one chart with a line per phase.
  await page.waitForSelector('figure.chart[data-metric="step_time_split"] canvas');
  // Its actors, grouped by role, and its config with only the env worth showing, each a tab.
  await page.click('#tab-actors');
  await page.waitForFunction(
    () =>
      /Rollout \(2\)/.test(document.body.innerText) &&
      /Trainer \(1\)/.test(document.body.innerText),
  );
  await page.click('#tab-config');
  assert.match(await page.locator('#env-rest').innerText(), /more inherited variables/);
  await page.click('#tab-charts');
  // Live: the chart's x range grows as steps arrive, without a reload.
  // `version` (the step again) is logged but not charted; an all-zero eval_accuracy sits on 0–1.
  assert.is(await page.locator('figure.chart[data-metric="version"]').count(), 0);
  assert.is(
    await page.locator('figure.chart[data-metric="eval_accuracy"]').getAttribute('data-y-range'),
    '0 1',
  );
  // A metric that has not changed is folded into one line while the job runs, and gets its chart
  // when it first changes: charts only appear, never vanish mid-run.
  const passRate = (step: number, value: number) =>
    apiCall(sb, 'POST', '/api/jobs/train1/metrics', {
      rows: [{ step, values: { pass_rate: value } }],
    });
  for (const step of [1, 2, 3]) assert.is((await passRate(step, 1)).status, 200);
  await page.waitForSelector('#constant-metrics code[data-metric="pass_rate"]', {
    state: 'attached',
  });
  assert.match(
    await page.locator('#constant-metrics summary').innerText(),
    /unchanged so far \(each is charted once it changes\)$/,
  );
  assert.is(await page.locator('figure.chart[data-metric="pass_rate"]').count(), 0);
  await passRate(4, 0.5);
  await page.waitForSelector('figure.chart[data-metric="pass_rate"] canvas');
  assert.is(await page.locator('#constant-metrics code[data-metric="pass_rate"]').count(), 0);
  await page.selectOption('#compare', 'finished');
  await page.waitForSelector('figure.chart[data-metric="reward_mean"] .u-legend', {
    state: 'attached',
  });
  // The jobs are named once, above the charts, not in a legend row of every chart.
  assert.equal(await page.locator('#chart-legend .key').allInnerTexts(), ['train1', 'finished']);
  assert.not.match(
    await page.locator('figure.chart[data-metric="reward_mean"] .u-legend').innerText(),
    /train1|finished/,
  );
  await page.screenshot({ path: `${shots}job.png`, fullPage: true });

  // Actor actions, with confirmation: restart rollout-0 (it may restart once), kill rollout-1.
  await page.click('nav a[href="#/actors"]');
  const row = (name: string) =>
    page.locator('tr[data-actor]', { has: page.locator(`td:text-is("${name}")`) });
  await row('rollout-0').locator('button', { hasText: 'Restart' }).click();
  await page.click('#confirm-ok');
  await until('rollout-0 to restart', async () => {
    const { body } = await apiCall<{ rows: { name: string; state: string; restarts: number }[] }>(
      sb,
      'GET',
      '/api/jobs/train1/actors',
    );
    const a = body.rows.find((x) => x.name === 'rollout-0');
    return a?.restarts === 1 && a.state === 'ALIVE' ? true : undefined;
  });
  // The trainer allows no restarts: Restart is off and says why.
  const trainerRestart = row('trainer').locator('button', { hasText: 'Restart' });
  assert.ok(await trainerRestart.isDisabled());
  assert.match(
    (await trainerRestart.getAttribute('title')) ?? '',
    /allows no restarts \(maxRestarts 0\): a restart would kill it for good/,
  );
  // Killing the trainer would end the job: the dialog says what the job leaves to resume from,
  // and Cancel has the focus, so an Enter out of habit keeps it alive.
  const dialogText = async () => {
    await row('trainer').locator('button', { hasText: 'Kill' }).click();
    await page.waitForSelector('#confirm[open]');
    return page.locator('#confirm-text').innerText();
  };
  assert.match(
    await dialogText(),
    /It is the Trainer of running job train1: calls in flight to it fail; train_ppo cannot go on without its trainer: the job fails; no checkpoint: the \d+ steps done are lost\.$/,
  );
  assert.is(await page.evaluate(() => document.activeElement?.id), 'confirm-cancel');
  await page.keyboard.press('Enter');
  await page.waitForSelector('#confirm:not([open])', { state: 'attached' });
  // Once the driver reports a checkpoint, the dialog gives the flags that resume from it.
  const reported = await apiCall(sb, 'POST', '/api/jobs/train1/report', {
    checkpoint: { step: 12, resumeFlags: '--ckpt-path /data/ckpt --load-checkpoint' },
  });
  assert.is(reported.status, 200);
  assert.match(
    await dialogText(),
    /the job fails; the last checkpoint is at step 12 \(steps 13–\d+ are lost\): run the same command with --ckpt-path \/data\/ckpt --load-checkpoint to resume from it\.$/,
  );
  await page.keyboard.press('Escape');
  await page.waitForSelector('#confirm:not([open])', { state: 'attached' });
  assert.is(
    (await apiCall(sb, 'POST', '/api/jobs/train1/report', { checkpoint: { step: 'x' } })).status,
    400,
  );
  await row('rollout-1').locator('button', { hasText: 'Kill' }).click();
  await page.waitForSelector('#confirm[open]');
  // The dialog says what happens to the running job the actor belongs to.
  assert.match(
    await page.locator('#confirm-text').innerText(),
    /Kill rollout-1 \(Rollout\)\? Its process is killed and it is not restarted\. It is the Rollout of running job train1: calls in flight to it fail; whether the job goes on depends on its driver/,
  );
  await page.click('#confirm-ok');
  await page.waitForFunction(() =>
    Array.from(document.querySelectorAll('tr[data-actor]')).some(
      (tr) => /rollout-1/.test(tr.textContent ?? '') && /DEAD/.test(tr.textContent ?? ''),
    ),
  );
  const causeOf = async (name: string) => {
    const { body } = await apiCall<{ rows: { name: string; deathCause: string | null }[] }>(
      sb,
      'GET',
      '/api/jobs/train1/actors',
    );
    return body.rows.find((x) => x.name === name)?.deathCause ?? '';
  };
  assert.match(await causeOf('rollout-1'), /: killed from the dashboard$/);
  await page.goBack();
  await page.waitForSelector('#stop-job');

  // Stop from the page, with confirmation.
  await page.click('#stop-job');
  await page.waitForSelector('#confirm[open]');
  assert.match(
    await page.locator('#confirm-text').innerText(),
    /cannot be resumed from here; the last checkpoint is at step 12 \(steps 13–\d+ are lost\): run the same command with --ckpt-path \/data\/ckpt --load-checkpoint to resume from it\.$/,
  );
  await page.click('#confirm-ok');
  await page.waitForFunction(
    () => document.querySelector('#job-status')?.textContent === 'STOPPED',
    undefined,
    { timeout: 15000 },
  );
  const job = await apiCall<{ status: string }>(sb, 'GET', '/api/jobs/train1');
  assert.is(job.body.status, 'STOPPED');
  // After the stop, the page says which step is saved and the exact command that resumes, and
  // offers no Stop button any more.
  await page.waitForSelector('#job-resume');
  const steps = await apiCall<{ progress: { step: number } }>(sb, 'GET', '/api/jobs/train1');
  assert.equal((await page.locator('#job-resume').innerText()).split('\n'), [
    `last finished step ${steps.body.progress.step}; the last checkpoint is at step 12 (steps 13–${steps.body.progress.step} are lost): run the same command with --ckpt-path /data/ckpt --load-checkpoint to resume from it`,
    `resume (with the job's submit options): rtjob submit -- ${fixtures}train-loop.ts --ckpt-path /data/ckpt --load-checkpoint`,
  ]);
  assert.is(await page.locator('#stop-job').count(), 0);
  // Its actors die with it, and the page shows it.
  await page.waitForFunction(
    () =>
      document.querySelectorAll('section[aria-label="Actors"] .badge').length === 3 &&
      Array.from(document.querySelectorAll('section[aria-label="Actors"] .badge')).every(
        (b) => b.textContent === 'DEAD',
      ),
    undefined,
    { timeout: 15000 },
  );

  // Ended with its job, the trainer reads otherwise than the rollout killed from the dashboard.
  assert.match(await causeOf('trainer'), /: (its job ended|its owner \S+ exited)$/);

  // Actors view: the job's rows in the paged table.
  await page.click('nav a[href="#/actors"]');
  await page.waitForSelector('#actor-range');
  assert.match(await page.locator('#actor-range').innerText(), /of [3-9]\d*/);
  await page.waitForSelector('tr[data-actor] >> text=trainer');
  await page.screenshot({ path: `${shots}actors.png`, fullPage: true });

  // Actor page: its logs (stdout and stderr), after its worker is gone.
  await page.click('tr[data-actor]:has-text("trainer") a');
  await page.waitForFunction(() =>
    /out: role 2 ready[\s\S]*err: role 2 ready/.test(
      document.querySelector('pre.log')?.textContent ?? '',
    ),
  );
  await page.screenshot({ path: `${shots}actor.png`, fullPage: true });
  await page.click('a[href="#/actors"]');
  await page.waitForSelector('#actor-range');

  // Keyboard: from the top of the page, Tab reaches the skip link, then the views.
  await page.reload();
  await page.waitForSelector('#actor-range');
  await page.keyboard.press('Tab');
  assert.is(await page.evaluate(() => document.activeElement?.className), 'skip');
  await page.keyboard.press('Tab');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => location.hash === '#/');
  assert.equal(errors, []);
  assert.equal(failed, []);
  await context.close();
});

test('at 420 px the Config tab reads one setting per block and actor rows stay one line', async () => {
  // train_ppo's own config rows, as its driver reports them, on the finished job.
  const argv = ['--agent-func', './examples/agent.ts', '--max-steps', '4', '--temperature', '0.7'];
  const { options, given } = parseTrainPpoArgs(argv);
  const config = flagConfig(options, given);
  assert.is((await apiCall(sb, 'POST', '/api/jobs/finished/report', { config })).status, 200);
  const { dashboardUrl, token } = sb.clusterFile();
  const context = await browser.newContext({ viewport: { width: 420, height: 900 } });
  const page = await context.newPage();
  await page.goto(`${dashboardUrl}/login?token=${encodeURIComponent(token)}`);
  await page.goto(`${dashboardUrl}/#/jobs/finished/config`);
  await page.waitForSelector('tr[data-setting="--micro-rollout-batch-size"]');
  assert.ok(
    (await page.evaluate(() => document.documentElement.scrollWidth)) <= 420,
    'the Config tab is no wider than the window',
  );
  // Each flag name on one line (never broken at its hyphens), its value, default and source in
  // the window: a short value shares the name's line, so a default row is one line high.
  const rows = await page.locator('table.config tr[data-setting]').evaluateAll((trs) =>
    trs.map((tr) => {
      const [name, value, dflt, from] = Array.from(tr.querySelectorAll('td')).map((td) => ({
        box: td.getBoundingClientRect(),
        shown: getComputedStyle(td).display !== 'none',
      }));
      return {
        setting: tr.getAttribute('data-setting')!,
        source: tr.getAttribute('data-source')!,
        height: tr.getBoundingClientRect().height,
        nameHeight: name!.box.height,
        right: Math.max(...[value!, dflt!, from!].filter((c) => c.shown).map((c) => c.box.right)),
      };
    }),
  );
  assert.ok(rows.length > 40, `${rows.length} settings`);
  for (const r of rows) {
    assert.ok(r.nameHeight < 24, `${r.setting}'s name is ${r.nameHeight} px high`);
    assert.ok(r.right <= 420, `${r.setting} reaches ${r.right} px`);
  }
  const micro = rows.find((r) => r.setting === '--micro-rollout-batch-size')!;
  assert.ok(micro.height < 32, `--micro-rollout-batch-size is ${micro.height} px high`);
  // The default of a changed setting is labelled, since the header is hidden.
  const temperature = page.locator('tr[data-setting="--temperature"]');
  assert.match(await temperature.innerText(), /^--temperature\s+0\.7\s+1\s+flag$/);
  assert.is(
    await temperature
      .locator('td')
      .nth(2)
      .evaluate((td) => getComputedStyle(td, '::before').content),
    '"default "',
  );
  await page.screenshot({ path: `${shots}config-420.png`, fullPage: true });

  // Actors: one line per actor (the table scrolls inside its box), the cause cut, in full on hover.
  await page.goto(`${dashboardUrl}/#/actors`);
  await page.waitForSelector('tr[data-actor] >> text=trainer');
  assert.ok((await page.evaluate(() => document.documentElement.scrollWidth)) <= 420);
  const heights = await page
    .locator('table.actors tbody tr')
    .evaluateAll((trs) => trs.map((tr) => tr.getBoundingClientRect().height));
  assert.ok(heights.length >= 3 && heights.every((y) => y < 40), `rows ${heights.join(', ')} px`);
  const cause = page
    .locator('tr[data-actor]', { has: page.locator('td.name:text-is("trainer")') })
    .locator('td.cause');
  assert.is(await cause.getAttribute('title'), await cause.innerText());
  await page.screenshot({ path: `${shots}actors-420.png`, fullPage: true });
  await context.close();
});

test('a failed job shows the error line first, then its last output', async () => {
  const r = await sb.run(['submit', '--job-id', 'died', '--', `${fixtures}throws.ts`]);
  assert.is(r.code, 1);
  const { dashboardUrl, token } = sb.clusterFile();
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await context.newPage();
  await page.goto(`${dashboardUrl}/login?token=${encodeURIComponent(token)}`);
  // The jobs list names the error, not the Node.js version line the log ends with.
  await page.click('nav a[href="#/jobs"]');
  const why = 'RoleDiedError: the trainer died: killed from the dashboard';
  assert.is(await page.locator('tr[data-job="died"] .reason').innerText(), why);
  // The job page: the error line above the box of the last output, whose end is in view.
  await page.click('tr[data-job="died"] a');
  await page.waitForSelector('#job-reason');
  assert.is(await page.locator('#job-reason').innerText(), why);
  const reason = (await page.locator('#job-reason').boundingBox())!;
  const box = (await page.locator('#job-message').boundingBox())!;
  assert.ok(reason.y < box.y, 'the error line comes before the output');
  assert.match(await page.locator('#job-message').innerText(), /step 29\/300/);
  assert.ok(
    await page
      .locator('#job-message')
      .evaluate((el) => el.scrollHeight > el.clientHeight && el.scrollTop > 0),
    'the output box is scrolled to its end',
  );
  // Its Charts tab says that it failed before it logged metrics, not how to log them.
  assert.is(
    await page.locator('#charts-empty').innerText(),
    `The job failed before it logged any metrics: ${why}. Its logs show the rest.`,
  );
  await page.click('#charts-empty a');
  await page.waitForFunction(() =>
    /step 29\/300/.test(document.querySelector('pre.log')?.textContent ?? ''),
  );
  assert.is(await page.evaluate(() => location.hash), '#/jobs/died/logs');
  await page.click('#tab-charts');
  await page.screenshot({ path: `${shots}failed-job.png` });
  await context.close();
});

test.run();
