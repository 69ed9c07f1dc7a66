// End to end: `rtjob start --head` in a temporary HOME, then every job command against it.
import {
  closeSync,
  mkdirSync,
  openSync,
  ftruncateSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { apiCall, pidAlive, Sandbox, until } from './helpers.ts';

const fixtures = fileURLToPath(new URL('../ops/fixtures/', import.meta.url));
const sb = new Sandbox();

test.before(async () => {
  await sb.startHead();
});
test.after(async () => {
  await sb.cleanup();
});

test('start --head writes cluster.json (0600) and status shows the node', async () => {
  const info = sb.clusterFile();
  assert.ok(info.token.length >= 24);
  const mode = statSync(join(sb.home, '.rtjob', 'cluster.json')).mode & 0o777;
  assert.is(mode, 0o600);
  // The daemons got their options (the token among them) by file: `ps` never shows the token.
  for (const pid of info.pids) {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    assert.not.ok(cmdline.includes(info.token), `pid ${pid}'s command line holds the token`);
  }
  const r = await sb.run(['status', '--json']);
  assert.is(r.code, 0, r.stderr);
  const s = JSON.parse(r.stdout);
  assert.ok(s.nodes.length >= 1);
  assert.ok(s.resources.total.CPU > 0);
  // The text form: CPU and memory in use (sampled by the node agent) next to reservations,
  // labelled, in human units, and the head process as the head samples itself. CPU is a rate: it
  // shows from the second sample on.
  const headLine = new RegExp(`head: +[\\d.]+% CPU, [\\d.]+ [KMG]iB \\(pid ${info.headPid}\\)`);
  const text = await until('status to show the CPU in use', async () => {
    const t = await sb.run(['status']);
    return /\d+% of \d+ cores/.test(t.stdout) && headLine.test(t.stdout) ? t : undefined;
  });
  assert.match(text.stdout, /CPU IN USE\s+MEMORY IN USE\s+CPU RESERVED\s+GPU RESERVED/);
  assert.match(text.stdout, /\d+(\.\d)? [KMGT]?i?B of \d+(\.\d)? [KMGT]?i?B \(\d+%\)/);
  assert.match(text.stdout, /reserved: +CPU [\d.]+\/\d+/);
  const again = await sb.run(['start', '--head', '--port', '0', '--dashboard-port', '0']);
  assert.is(again.code, 1);
  assert.match(again.stderr, /already running/);
});

test('submit streams the driver output; --env and the caller env reach it', async () => {
  const r = await sb.run(
    [
      'submit',
      '--env',
      'FOO=bar',
      '--job-id',
      'echo1',
      '--',
      join(fixtures, 'echo-env.ts'),
      'a',
      'b',
    ],
    {
      env: { ASYNC_NUM_TASKS: '64' },
    },
  );
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /FOO=bar ASYNC_NUM_TASKS=64 JOB=echo1/);
  assert.match(r.stdout, /args=a,b/);
  assert.match(r.stderr, /SUCCEEDED/);
  const list = JSON.parse((await sb.run(['list', '--json'])).stdout);
  const job = list.find((j: { jobId: string }) => j.jobId === 'echo1');
  assert.is(job.status, 'SUCCEEDED');
  assert.is(job.exitCode, 0);
  assert.ok(job.startedAt <= job.endedAt);
});

test('a failing job exits non-zero with its last output lines in the message', async () => {
  const r = await sb.run(['submit', '--job-id', 'fail1', '--', join(fixtures, 'fail.ts')]);
  assert.is(r.code, 1);
  assert.match(r.stderr, /FAILED/);
  // The driver's own error is streamed with its log, and printed once.
  assert.is(
    (r.stdout + r.stderr).match(/boom: the reward model is unreachable/g)?.length,
    1,
    r.stdout + r.stderr,
  );
  assert.match(
    r.stderr,
    /job fail1 FAILED in [\d.]+s \(exit code 7\)\ndriver exited with code 7\n/,
  );
  const { body } = await apiCall<{ status: string; exitCode: number; message: string }>(
    sb,
    'GET',
    '/api/jobs/fail1',
  );
  assert.is(body.status, 'FAILED');
  assert.is(body.exitCode, 7);
  assert.match(body.message, /line 29/);
  const logs = await sb.run(['logs', 'fail1']);
  assert.match(logs.stdout, /line 0\n[\s\S]*line 29/);
});

test('stop-job stops a running driver (SIGTERM) and its process is gone', async () => {
  const pidFile = join(sb.home, 'sleeper.pid');
  const r = await sb.run([
    'submit',
    '--no-wait',
    '--job-id',
    'sleep1',
    '--env',
    `PID_FILE=${pidFile}`,
    '--',
    join(fixtures, 'sleeper.ts'),
  ]);
  assert.is(r.code, 0, r.stderr);
  assert.is(r.stdout.trim(), 'sleep1');
  const pid = await until('the driver to start', () => {
    try {
      return Number(require_('fs').readFileSync(pidFile, 'utf8')) || undefined;
    } catch {
      return undefined;
    }
  });
  // Follow logs until a few ticks are there, then stop.
  await until('ticks in the log', async () =>
    (await sb.run(['logs', 'sleep1'])).stdout.includes('tick 2') ? true : undefined,
  );
  const stop = await sb.run(['stop-job', 'sleep1']);
  assert.is(stop.code, 0, stop.stderr);
  assert.match(stop.stdout, /STOPPED/);
  assert.not.ok(pidAlive(pid));
  // SIGTERM did it (128 + 15), within the grace period, not the SIGKILL after it.
  const { body } = await apiCall<{ exitCode: number }>(sb, 'GET', '/api/jobs/sleep1');
  assert.is(body.exitCode, 143);
  const again = await sb.run(['stop-job', 'sleep1']);
  assert.match(again.stdout, /already ended/);
});

test('logs -f follows a running job to its end', async () => {
  const r = await sb.run([
    'submit',
    '--no-wait',
    '--job-id',
    'tick5',
    '--env',
    'TICKS=5',
    '--',
    join(fixtures, 'sleeper.ts'),
  ]);
  assert.is(r.code, 0, r.stderr);
  const f = await sb.run(['logs', '-f', 'tick5']);
  assert.is(f.code, 0, f.stderr);
  assert.match(f.stdout, /tick 0\n[\s\S]*tick 4\ndone/);
});

test('metrics.log rows are readable with rtjob metrics --csv', async () => {
  const r = await sb.run(['submit', '--job-id', 'm1', '--', join(fixtures, 'log-metrics.ts')]);
  assert.is(r.code, 0, r.stderr + r.stdout);
  const csv = await sb.run(['metrics', 'm1', '--csv']);
  assert.is(csv.code, 0, csv.stderr);
  const lines = csv.stdout.trim().split('\n');
  assert.is(lines[0], 'step,time,kl,loss,reward_mean');
  assert.is(lines.length, 6);
  assert.match(lines[5]!, /^4,\d+,0\.04,0\.19999999999999996,0\.4$/);
  const table = await sb.run(['metrics', 'm1']);
  assert.match(
    table.stdout.split('\n')[0]!,
    /^step\s+reward_mean\s+kl\s+loss\s*$/,
    'key ones first',
  );
  const keys = await sb.run(['metrics', 'm1', '--keys', 'kl']);
  assert.match(keys.stdout.split('\n')[0]!, /^step\s+kl\s*$/);
  // --plot draws the logged reward per step, and --keys adds lines.
  const svg = join(sb.home, 'm1.svg');
  const plot = await sb.run(['metrics', 'm1', '--plot', svg, '--keys', 'k']);
  assert.is(plot.code, 0, plot.stderr);
  assert.is(plot.stdout.trim(), `wrote ${svg}`);
  const drawn = readFileSync(svg, 'utf8');
  assert.match(drawn, /<text[^>]*>reward \(mean per step\)<\/text>/);
  assert.match(drawn, /<text[^>]*>kl<\/text>/);
  assert.is(drawn.match(/<circle /g)?.length, 15, 'five steps of reward, its running mean, kl');
  const none = await sb.run(['metrics', 'no-such-job', '--plot', svg]);
  assert.is.not(none.code, 0);
});

test('--working-dir uploads the directory and runs the entrypoint inside it', async () => {
  const dir = join(sb.home, 'proj');
  mkdirSync(join(dir, 'lib'), { recursive: true });
  mkdirSync(join(dir, 'node_modules', 'big'), { recursive: true });
  writeFileSync(join(dir, 'lib', 'answer.ts'), 'export const answer = 42;\n');
  writeFileSync(
    join(dir, 'main.ts'),
    "import { answer } from './lib/answer.ts';\nimport { existsSync } from 'node:fs';\nconsole.log(`answer=${answer} nm=${existsSync('node_modules')} ignored=${existsSync('secret.txt')}`);\n",
  );
  writeFileSync(join(dir, 'secret.txt'), 'x');
  writeFileSync(join(dir, '.rtjobignore'), 'secret.txt\n');
  const r = await sb.run(['submit', '--working-dir', dir, '--', './main.ts'], { cwd: sb.home });
  assert.is(r.code, 0, r.stderr + r.stdout);
  assert.match(r.stdout, /answer=42 nm=false ignored=false/);
});

test('bad requests get clear errors and the head keeps serving', async () => {
  const unknown = await sb.run(['logs', 'no-such-job']);
  assert.is(unknown.code, 1);
  assert.match(unknown.stderr, /no job with id no-such-job/);
  const taken = await sb.run(['submit', '--job-id', 'echo1', '--', join(fixtures, 'echo-env.ts')]);
  assert.is(taken.code, 1);
  assert.match(taken.stderr, /already taken/);
  const missing = await sb.run(['submit', '--', './does-not-exist.ts']);
  assert.is(missing.code, 2);
  assert.match(missing.stderr, /entrypoint script not found: \.\/does-not-exist\.ts/);
  const nocmd = await sb.run(['submit', '--', 'no-such-command-xyz']);
  assert.match(nocmd.stderr, /entrypoint command not found: no-such-command-xyz/);
  const badId = await sb.run(['submit', '--job-id', '../etc', '--', 'true']);
  assert.match(badId.stderr, /invalid job id/);
  // A sparse 101 MiB file: over the limit without writing 101 MiB.
  const big = join(sb.home, 'bigproj');
  mkdirSync(big);
  const fd = openSync(join(big, 'weights.bin'), 'w');
  ftruncateSync(fd, 101 * 1024 * 1024);
  closeSync(fd);
  const tooBig = await sb.run(['submit', '--working-dir', big, '--', 'true']);
  assert.is(tooBig.code, 2);
  assert.match(tooBig.stderr, /over the 100 MiB limit/);
  const malformed = await apiCall<{ error: string }>(sb, 'POST', '/api/jobs', { entrypoint: 42 });
  assert.is(malformed.status, 400);
  assert.is(malformed.body.error, 'BAD_REQUEST');
  const status = await sb.run(['status']);
  assert.is(status.code, 0);
});

test('stop leaves no processes behind', async () => {
  const pidFile = join(sb.home, 'orphan.pid');
  await sb.run([
    'submit',
    '--no-wait',
    '--job-id',
    'orphan',
    '--env',
    `PID_FILE=${pidFile}`,
    '--',
    join(fixtures, 'sleeper.ts'),
  ]);
  const driver = await until('the driver to start', () => {
    try {
      return Number(require_('fs').readFileSync(pidFile, 'utf8')) || undefined;
    } catch {
      return undefined;
    }
  });
  // `status` lists the running job's driver (its process group) with its CPU and memory.
  const listed = await until('status to list the driver', async () => {
    const t = await sb.run(['status']);
    return /driver: +orphan [\d.]+% CPU, [\d.]+ [KMG]iB \(pid \d+\)/.test(t.stdout) ? t : undefined;
  });
  assert.match(listed.stdout, /head: /);
  const { pids } = sb.clusterFile();
  const r = await sb.run(['stop']);
  assert.is(r.code, 0, r.stderr);
  for (const pid of [...pids, driver])
    assert.not.ok(pidAlive(pid), `pid ${pid} survived rtjob stop`);
  const after = await sb.run(['status']);
  assert.is(after.code, 3);
});

test('submit with no cluster runs the job on a private local one and stops it', async () => {
  const lone = new Sandbox();
  try {
    const r = await lone.run(['submit', '--', join(fixtures, 'echo-env.ts'), 'solo']);
    assert.is(r.code, 0, r.stderr);
    assert.match(r.stdout, /args=solo/);
    assert.match(r.stderr, /started a local one/);
    const st = await lone.run(['status']);
    assert.is(st.code, 3);
  } finally {
    await lone.cleanup();
  }
});

test('a job on a private local cluster leaves its metrics as CSV in the session, and says where', async () => {
  const lone = new Sandbox();
  try {
    const r = await lone.run(['submit', '--', join(fixtures, 'log-metrics.ts')]);
    assert.is(r.code, 0, r.stderr);
    const file = /metrics of \S+: (\S+\.metrics\.csv)/.exec(r.stderr)?.[1];
    assert.ok(file, r.stderr);
    const [head, ...rows] = readFileSync(file!, 'utf8').trim().split('\n');
    assert.is(head, 'step,time,kl,loss,reward_mean');
    assert.is(rows.length, 5);
  } finally {
    await lone.cleanup();
  }
});

import { createRequire } from 'node:module';
const require_ = createRequire(import.meta.url);

test.run();
