// A real train_ppo run of an AI SDK agent that exports its OpenTelemetry spans to its gateway:
// the job's Samples tab, in Debian's Chromium, draws each kept episode's span tree with its model
// calls in place (tokens, logprobs, version), and `rtjob samples` prints the same tree; the job
// page shows the verdict `rtjob diagnose` prints; each span's timeline bar is drawn where it
// started, and its token counts are checked against the gateway's. A second run, of an agent that
// estimates its tokens client-side, has its spans marked as disagreeing. The screenshot is the
// README's (test/dashboard/screenshots/agent-trace.png, copied to docs/).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser } from 'playwright-core';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Sandbox } from '../cli/helpers.ts';
import { launchChromium } from './browser.ts';

const shots = fileURLToPath(new URL('./screenshots/', import.meta.url));
const agent = fileURLToPath(new URL('../fixtures/agents/traced-ai-sdk-agent.ts', import.meta.url));
const estimating = fileURLToPath(
  new URL('../fixtures/agents/traced-estimating-agent.ts', import.meta.url),
);
const model = fileURLToPath(new URL('../../model/pretrained/rtjob-tiny-tool', import.meta.url));
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

/** One step of the tool model with the agent given, as job `jobId`, its samples kept. */
async function train(jobId: string, agentFile: string): Promise<void> {
  const run = await sb.run(
    [
      'submit',
      '--job-id',
      jobId,
      '--',
      'train_ppo',
      '--pretrain',
      model,
      '--agent-func',
      agentFile,
      '--max-steps',
      '1',
      '--rollout-batch-size',
      '2',
      '--n-samples-per-prompt',
      '2',
      '--train-batch-size',
      '4',
      '--micro-train-batch-size',
      '4',
      '--generate-max-len',
      '48',
      '--eval-dataset',
      '',
      '--log-samples',
      '4',
      '--save-path',
      join(sb.home, jobId),
    ],
    // One step of the tool model through the agent: minutes on a shared 2-core machine.
    { timeoutMs: 600_000 },
  );
  assert.is(run.code, 0, run.stderr);
}

test('the Samples tab and rtjob samples show the agent’s trace with its completions', async () => {
  await train('traced', agent);

  const cli = await sb.run(['samples', 'traced']);
  assert.is(cli.code, 0, cli.stderr);
  assert.match(cli.stdout, /\n {4}ai\.generateText {2}\d/);
  assert.match(cli.stdout, /\n {6,}model call chatcmpl-\S+ {2}[\d.]+m?s {2}prompt \d+/);
  assert.match(cli.stdout, /#0 \d+ tokens {2}v0 {2}mean logprob -\d/);
  assert.match(cli.stdout, /doGenerate {2}[\d.]+m?s {2}tokens \d+ in \/ \d+ out \(= gateway\)/);

  const link = (await sb.run(['dashboard'])).stdout.trim();
  const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${link}#/jobs/traced`);
  // The job page's verdict is what `rtjob diagnose` says.
  const diag = await sb.run(['diagnose', 'traced', '--json']);
  assert.is(diag.code, 0, diag.stderr);
  const d = JSON.parse(diag.stdout) as { limit: string; change: { flag: string; to: string } };
  await page.waitForSelector('#job-verdict .verdict');
  assert.is(await page.getAttribute('#job-verdict .verdict', 'data-limit'), d.limit);
  assert.is(
    await page.locator('#job-verdict code.change').innerText(),
    `${d.change.flag} ${d.change.to}`,
  );
  await page.click('#tab-samples');
  await page.waitForSelector('article.sample details.trace');
  const first = page.locator('article.sample').first();
  // The run's span at the root, its steps under it, each model call under its step.
  const root = first.locator('ul.trace-tree > li.span').first();
  assert.is(await root.locator(':scope > .row code.name').innerText(), 'ai.generateText');
  const calls = first.locator('li.span li.call[data-joined="response_id"]');
  assert.ok((await calls.count()) >= 1);
  const call = calls.first();
  assert.match(
    await call.locator('xpath=../..').locator(':scope > .row').innerText(),
    /doGenerate/,
  );
  assert.match(
    await call.locator('.completion').first().innerText(),
    /\d+ tok · v0 · mean logprob/,
  );
  const tok = call.locator('.tok').first();
  assert.match((await tok.getAttribute('title')) ?? '', /^logprob -?\d/);
  // Each span and call has a drawn bar on the episode's timeline: wide and tall enough to see,
  // inside its track, placed left to right in the order the spans started.
  const bars = await first.locator('ul.trace-tree .timeline').evaluateAll((tracks) =>
    tracks.map((t) => {
      const track = t.getBoundingClientRect();
      const b = t.querySelector('.span-bar')!;
      const r = b.getBoundingClientRect();
      return {
        start: Number(b.getAttribute('data-start')),
        track: [track.left, track.width],
        x: r.left - track.left,
        width: r.width,
        height: r.height,
        right: r.right - track.right,
      };
    }),
  );
  assert.ok(bars.length >= 5, `${bars.length} bars`);
  for (const b of bars) {
    assert.ok(b.width >= 1 && b.height >= 4, `bar ${JSON.stringify(b)} is drawn`);
    assert.ok(b.x >= 0 && b.right <= 0.5, `bar ${JSON.stringify(b)} inside its track`);
  }
  // One waterfall: the tracks line up, so positions compare across rows.
  for (const b of bars) assert.equal(b.track, bars[0]!.track, 'tracks aligned');
  const byStart = [...bars].sort((a, b) => a.start - b.start);
  for (let i = 1; i < byStart.length; i++)
    assert.ok(byStart[i]!.x >= byStart[i - 1]!.x - 0.5, 'bars placed in start order');
  assert.ok(byStart.at(-1)!.x > byStart[0]!.x, 'later spans start further right');
  // The doGenerate steps report their tokens, and they are the gateway's.
  const usage = first.locator('li.span .span-usage');
  assert.ok((await usage.count()) >= 2);
  for (const state of await usage.evaluateAll((xs) => xs.map((x) => x.getAttribute('data-usage'))))
    assert.is(state, 'match');
  await first.scrollIntoViewIfNeeded();
  await page.screenshot({ path: `${shots}agent-trace.png`, fullPage: false });
  assert.equal(errors, []);
  await context.close();
});

test('a span whose token counts are not the gateway’s is marked in the Samples tab', async () => {
  // Token counts estimated client-side, one span per call joined by its traceparent.
  await train('estimated', estimating);
  const cli = await sb.run(['samples', 'estimated']);
  assert.is(cli.code, 0, cli.stderr);
  assert.match(
    cli.stdout,
    /\n {4}chat {2}[\d.]+m?s {2}tokens MISMATCH span \d+ in \/ \d+ out, gateway \d+ in \/ \d+ out over 1 call/,
  );
  const link = (await sb.run(['dashboard'])).stdout.trim();
  const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
  const page = await context.newPage();
  await page.goto(`${link}#/jobs/estimated`);
  await page.click('#tab-samples');
  await page.waitForSelector('article.sample details.trace');
  const first = page.locator('article.sample').first();
  const span = first.locator('ul.trace-tree > li.span').first();
  assert.is(await span.locator(':scope > .row code.name').innerText(), 'chat');
  assert.is(await span.locator('li.call').first().getAttribute('data-joined'), 'traceparent');
  const usage = span.locator(':scope > .row .span-usage');
  assert.is(await usage.getAttribute('data-usage'), 'mismatch');
  assert.match(await usage.innerText(), /^tokens ≠ gateway: span \d+ in \/ \d+ out, gateway \d+/);
  // In the stylesheet's colour for what is wrong, as a failed span's error is.
  const colour = await usage.evaluate((e) => getComputedStyle(e).color);
  const bad = await page.evaluate(() => {
    const probe = document.createElement('span');
    probe.className = 'span-error';
    document.body.append(probe);
    return getComputedStyle(probe).color;
  });
  assert.is(colour, bad);
  await context.close();
});

test.run();
