// Ctrl-C while `rtjob submit` follows a job, in a real terminal (a pty from util-linux `script`):
// the first asks whether to stop the job, a second one at that prompt stops it — no crash, no
// stack, no job left running.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { apiCall, binPath, Sandbox, until } from './helpers.ts';

const fixtures = fileURLToPath(new URL('../ops/fixtures/', import.meta.url));
const sb = new Sandbox();
test.before(() => sb.startHead().then(() => undefined));
test.after(() => sb.cleanup());

test('a second Ctrl-C at the stop prompt stops the job', async () => {
  const cmd = [
    process.execPath,
    binPath,
    'submit',
    '--job-id',
    'tty1',
    '--',
    join(fixtures, 'sleeper.ts'),
  ]
    .map((a) => `'${a}'`)
    .join(' ');
  // `exec`: the shell `script` starts ($SHELL, dash when unset) must not stay in the terminal's
  // process group, or the Ctrl-C kills it too and the exit code is the shell's 130.
  const child = spawn('script', ['-qfec', `exec ${cmd}`, '/dev/null'], {
    env: { ...process.env, HOME: sb.home, RTJOB_HOME: join(sb.home, '.rtjob') },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  await until('ticks', () => (out.includes('tick 2') ? true : undefined));
  child.stdin.write('\x03');
  await until('the prompt', () => (out.includes('stop job tty1? [y/N]') ? true : undefined));
  child.stdin.write('\x03');
  await until('the job to stop', async () => {
    const { body } = await apiCall<{ status: string }>(sb, 'GET', '/api/jobs/tty1');
    return body.status === 'STOPPED' ? true : undefined;
  });
  const code = await exited;
  assert.match(out, /stopping tty1/);
  assert.not.match(out, /AbortError|\n\s+at /, out);
  assert.is(code, 1, 'a stopped job is not a success');
});

test.run();
