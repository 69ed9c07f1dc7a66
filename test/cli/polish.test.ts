// The CLI's small promises: --version, help that never starts a job, an error printed once as one
// line with a hint (the stack only with --verbose or RTJOB_DEBUG=1), and a taken port named with
// the flag that moves it.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { Sandbox } from './helpers.ts';

const sb = new Sandbox();
test.after(() => sb.cleanup());

test('--version prints the package version', async () => {
  const { version } = JSON.parse(
    readFileSync(new URL('../../package.json', import.meta.url), 'utf8'),
  );
  const r = await sb.run(['--version']);
  assert.is(r.code, 0);
  assert.is(r.stdout.trim(), version);
});

test('submit -- train_ppo --help prints the help and starts no job', async () => {
  const r = await sb.run(['submit', '--', 'train_ppo', '--help']);
  assert.is(r.code, 0, r.stderr);
  assert.match(r.stdout, /usage: train_ppo/);
  assert.match(r.stdout, /--log-samples/);
  assert.not.match(r.stderr, /started a local one/);
  assert.not.ok(existsSync(join(sb.home, '.rtjob', 'runs')), 'no cluster was started for it');
});

test('an unexpected error prints one line and a hint; --verbose and RTJOB_DEBUG=1 add the stack', async () => {
  // A session whose database is not one: SQLite's own error, which the CLI does not foresee.
  const session = join(sb.home, 'corrupt-session');
  mkdirSync(session, { recursive: true });
  writeFileSync(join(session, 'head.sqlite'), 'not a database');
  const r = await sb.run(['list', '--session', session]);
  assert.is(r.code, 1);
  const lines = r.stderr.trim().split('\n');
  assert.is(lines.length, 2, r.stderr);
  assert.match(lines[0]!, /^rtjob: .*not a database/);
  assert.is(lines[1], '(run with --verbose or RTJOB_DEBUG=1 for details)');
  const runs: { args: string[]; env: Record<string, string> }[] = [
    { args: ['--verbose'], env: {} },
    { args: [], env: { RTJOB_DEBUG: '1' } },
  ];
  for (const extra of runs) {
    const v = await sb.run([...extra.args, 'list', '--session', session], { env: extra.env });
    assert.match(v.stderr, /\n\s+at /, 'the stack');
  }
});

test('--metadata that is not a JSON object of strings is refused in plain words (G24)', async () => {
  for (const bad of ['{bad', '[1]', '{"n": 3}']) {
    const r = await sb.run(['submit', '--metadata', bad, '--', 'true']);
    assert.is(r.code, 2, r.stderr);
    assert.is(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr, /^rtjob: --metadata.*e\.g\. --metadata '\{"team": "rl", "run": "7"\}'/);
    assert.not.match(r.stderr, /Unexpected token|not valid JSON/);
  }
});

test('a usage error is one line with its exit code', async () => {
  const r = await sb.run(['samples', 'j', '--session', join(sb.home, 'nope')]);
  assert.is(r.code, 2);
  assert.is(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr, /--session \S+nope: not a session dir/);
});

test('start --head on a taken port says so in one line, naming the flag', async () => {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as { port: number }).port;
  try {
    const r = await sb.run(['start', '--head', '--port', String(port), '--dashboard-port', '0']);
    assert.is(r.code, 2);
    assert.is(
      r.stderr.trim(),
      `rtjob: port ${port} is in use (another rtjob head, or another program): pass --port N (0 picks a free one)`,
    );
    const d = await sb.run(['start', '--head', '--port', '0', '--dashboard-port', String(port)]);
    assert.match(d.stderr, /pass --dashboard-port N/);
  } finally {
    srv.close();
  }
});

test("npx rtjob in the checkout, as the README's quick start runs it, is the CLI", async () => {
  // npm links the package's bin (dist/cli/bin.js, built by `prepare` at npm install) into its
  // npx cache; it was missing on a fresh clone when only prepack built dist/.
  const root = fileURLToPath(new URL('../../', import.meta.url));
  const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const r = spawnSync('npx', ['rtjob', '--version'], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, npm_config_offline: 'true', npm_config_update_notifier: 'false' },
    timeout: 120_000,
  });
  assert.is(r.status, 0, `npx rtjob --version: ${r.stderr}`);
  assert.is(r.stdout.trim(), version);
});

test.run();
