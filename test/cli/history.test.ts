// History that outlives the job: a job run on the private cluster of `rtjob submit` (the embedded
// default) prints its dashboard link while it runs, and afterwards, with no cluster running,
// `rtjob list`, `logs`, `metrics`, `samples` and `rtjob dashboard` read its session from disk.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { binPath, Sandbox } from './helpers.ts';

const fixtures = fileURLToPath(new URL('../ops/fixtures/', import.meta.url));
const sb = new Sandbox();
let jobId = '';
let submitErr = '';

test.before(async () => {
  const r = await sb.run(['submit', '--job-id', 'hist1', '--', join(fixtures, 'log-samples.ts')]);
  assert.is(r.code, 0, r.stderr);
  jobId = 'hist1';
  submitErr = r.stderr;
});
test.after(() => sb.cleanup());

test('submit on the embedded default prints the dashboard login link while the job runs, and where the run is kept', () => {
  assert.match(
    submitErr,
    /dashboard \(while the job runs\): http:\/\/127\.0\.0\.1:\d+\/login\?token=[\w-]+#\/jobs\/hist1/,
  );
  assert.match(submitErr, /the run is kept in \S+: rtjob samples hist1/);
});

test('with no cluster running, list / logs / metrics read the latest session from disk', async () => {
  const list = await sb.run(['list']);
  assert.is(list.code, 0, list.stderr);
  assert.match(list.stderr, /no cluster running: reading the finished session \S+runs/);
  assert.match(list.stdout, /hist1\s+SUCCEEDED/);
  const logs = await sb.run(['logs', jobId]);
  assert.match(logs.stdout, /logged 3 steps with samples/);
  const metrics = await sb.run(['metrics', jobId, '--csv']);
  assert.is(metrics.stdout.trim().split('\n').length, 4, metrics.stdout);
  assert.match(metrics.stdout, /^step,time,kl,reward_mean/);
});

test('rtjob samples prints the latest step, one step, one prompt over time, and filters by reward', async () => {
  const text = await sb.run(['samples', jobId]);
  assert.is(text.code, 0, text.stderr);
  assert.match(text.stdout, /step 3: 2 samples \(steps with samples: 1–3/);
  assert.match(
    text.stdout,
    /step 3 · best · reward 1 · prompt #17 · version 2 · stop: stop · 20 prompt \+ 21 generated tokens/,
  );
  assert.match(text.stdout, /prompt: What is 3 \+ 4\?/);
  assert.match(text.stdout, /→ tool call calc\(\{"expr":"3\+4"\}\)/);
  assert.match(text.stdout, /tool: 7/);
  assert.match(text.stdout, /extraInfo: solved_turn=2/);
  const one = JSON.parse((await sb.run(['samples', jobId, '--step', '1', '--json'])).stdout);
  assert.equal(one.steps, [1, 2, 3]);
  assert.is(one.step, 1);
  assert.equal(
    one.samples.map((s: { key: string }) => s.key),
    ['17', '5'],
  );
  const over = JSON.parse((await sb.run(['samples', jobId, '--prompt', '17', '--json'])).stdout);
  assert.equal(
    over.samples.map((s: { step: number; score: number }) => [s.step, +s.score.toFixed(3)]),
    [
      [1, 0.333],
      [2, 0.667],
      [3, 1],
    ],
  );
  const good = JSON.parse(
    (await sb.run(['samples', jobId, '--min-score', '0.5', '--json'])).stdout,
  );
  assert.equal(
    good.samples.map((s: { key: string }) => s.key),
    ['17'],
  );
  const bad = await sb.run(['samples', jobId, '--step', 'x']);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, /--step must be a number, got x/);
});

test('--session DIR reads that session; a dir that is not one is a usage error', async () => {
  const dir = /the run is kept in (\S+):/.exec(submitErr)![1]!;
  const r = await sb.run(['list', '--session', dir, '--json']);
  assert.is(r.code, 0, r.stderr);
  assert.equal(
    JSON.parse(r.stdout).map((j: { jobId: string }) => j.jobId),
    ['hist1'],
  );
  const bad = await sb.run(['list', '--session', sb.home]);
  assert.is(bad.code, 2);
  assert.match(bad.stderr, /not a session dir/);
});

test('a machine with no cluster and no session says what to do', async () => {
  const empty = new Sandbox();
  try {
    const r = await empty.run(['list']);
    assert.is(r.code, 3);
    assert.match(
      r.stderr,
      /no cluster is running and no finished session is on this machine: run a job with `rtjob submit -- train_ppo`/,
    );
  } finally {
    await empty.cleanup();
  }
});

test('rtjob dashboard serves the finished session read-only until Ctrl-C', async () => {
  const child = spawn(process.execPath, [binPath, 'dashboard', '--port', '0'], {
    env: { ...process.env, HOME: sb.home, RTJOB_HOME: join(sb.home, '.rtjob') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const link = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = /(http:\/\/\S+\/login\?token=\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    child.on('exit', () => reject(new Error(`dashboard exited: ${err}`)));
  });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  try {
    assert.match(err, /serving the finished session \S+ read-only/);
    const u = new URL(link);
    const token = u.searchParams.get('token')!;
    const auth = { authorization: `Bearer ${token}` };
    const version = await (await fetch(`${u.origin}/api/version`, { headers: auth })).json();
    assert.ok(version.readOnly?.sessionDir, 'the API says it is read-only');
    const jobs = await (await fetch(`${u.origin}/api/jobs`, { headers: auth })).json();
    assert.equal(
      jobs.jobs.map((j: { jobId: string }) => j.jobId),
      ['hist1'],
    );
    const page = await fetch(`${u.origin}/`, { headers: auth });
    assert.is(page.status, 200);
    assert.match(await page.text(), /rtjob dashboard/);
    for (const [method, path] of [
      ['POST', '/api/jobs'],
      ['POST', `/api/jobs/${jobId}/stop`],
      ['DELETE', `/api/jobs/${jobId}`],
      ['POST', `/api/jobs/${jobId}/samples`],
    ]) {
      const res = await fetch(`${u.origin}${path}`, {
        method,
        headers: { ...auth, 'content-type': 'application/json' },
        body: method === 'DELETE' ? undefined : '{}',
      });
      assert.is(res.status, 405, `${method} ${path}`);
      assert.is((await res.json()).error, 'READ_ONLY');
    }
  } finally {
    child.kill('SIGINT');
  }
  assert.is(await exited, 0, 'Ctrl-C ends it cleanly');
});

test('every embedded run stays in one history: a later failed run hides nothing', async () => {
  const r = await sb.run(['submit', '--job-id', 'hist2', '--', join(fixtures, 'fail.ts')]);
  assert.is.not(r.code, 0);
  const list = await sb.run(['list', '--json']);
  assert.match(list.stderr, /reading the run history, 2 finished sessions/);
  const ids = (JSON.parse(list.stdout) as { jobId: string }[]).map((j) => j.jobId);
  assert.equal(ids, ['hist2', 'hist1'], 'newest first, both sessions');
  const samples = await sb.run(['samples', 'hist1', '--json']);
  assert.is(samples.code, 0, samples.stderr);
  assert.equal(JSON.parse(samples.stdout).steps, [1, 2, 3]);
  const metrics = await sb.run(['metrics', 'hist1', '--csv']);
  assert.is(metrics.stdout.trim().split('\n').length, 4, metrics.stdout);
  const logs = await sb.run(['logs', 'hist2']);
  assert.is(logs.code, 0, logs.stderr);
});

test('a train_ppo flag typo fails before any cluster starts, and leaves no session', async () => {
  const r = await sb.run(['submit', '--', 'train_ppo', '--agent-fucn', './agent.ts']);
  assert.is(r.code, 2);
  assert.match(r.stderr, /train_ppo: unknown flag --agent-fucn \(did you mean --agent-func\?\)/);
  assert.not.match(r.stderr, /started a local one/);
  const list = await sb.run(['list']);
  assert.match(list.stderr, /2 finished sessions/);
});

test('a missing agent file, a Hub id not cached offline or a missing dataset fails before any cluster starts', async () => {
  const cases: [string[], RegExp, Record<string, string>?][] = [
    [
      ['--agent-func', join(fixtures, 'log-sampels.ts')],
      /--agent-func: no such file \S+log-sampels\.ts \(did you mean \S+log-samples\.ts\?\)/,
    ],
    [
      ['--pretrain', 'Qwen/Qwen2.5-0.5B-Instruct'],
      /--pretrain: Qwen\/Qwen2\.5-0\.5B-Instruct@main is not in the Hub cache \(.*\) and HF_HUB_OFFLINE=1 forbids fetching it: run once online, or hf download Qwen\/Qwen2\.5-0\.5B-Instruct/,
      { HF_HUB_OFFLINE: '1' },
    ],
    [
      ['--prompt_data', 'json@./data'],
      /--prompt-data: 'json@\.\/data' is neither a built-in dataset \(arith[^)]*\) nor a file or directory/,
    ],
  ];
  for (const [flags, re, env] of cases) {
    const r = await sb.run(['submit', '--', 'train_ppo', ...flags], env ? { env } : {});
    assert.is(r.code, 2, r.stderr);
    assert.match(r.stderr, re);
    assert.not.match(r.stderr, /started a local one/);
  }
  const list = await sb.run(['list']);
  assert.match(list.stderr, /2 finished sessions/);
});

test.run();
