// `--token-file`: the token by a file no other user may read (how Slurm and Kubernetes hand it
// over), for `start --head` and the commands that talk to a head; a bad file is one line.
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { Sandbox } from './helpers.ts';

const sb = new Sandbox();
const token = 'f'.repeat(24) + '0123456789abcdef';
const file = (name: string, mode: number, text = `${token}\n`) => {
  const p = join(sb.home, name);
  writeFileSync(p, text);
  chmodSync(p, mode);
  return p;
};

test.after(async () => {
  await sb.cleanup();
});

test('start --head takes the token from the file and does not print it', async () => {
  const r = await sb.startHead(['--token-file', file('token', 0o600)]);
  assert.is(sb.clusterFile().token, token);
  assert.not.ok(r.stdout.includes(token), `the output shows the token:\n${r.stdout}`);
  assert.match(r.stdout, /log in with the token in .*token\)/);
  // A command that talks to the head by address and token file.
  const status = await sb.run([
    'status',
    '--json',
    '--address',
    sb.clusterFile().dashboardUrl,
    '--token-file',
    file('group-token', 0o640),
  ]);
  assert.is(status.code, 0, status.stderr);
  assert.is(JSON.parse(status.stdout).nodes.length, 1);
});

test('a token file any user may read, a missing one, an empty one, or both ways: one line', async () => {
  const cases: [string[], RegExp][] = [
    [['--token-file', file('open', 0o644)], /any user may read it \(mode 644\); chmod 600 it$/],
    [['--token-file', join(sb.home, 'nope')], /nope: cannot read it \(ENOENT\)$/],
    [['--token-file', file('empty', 0o600, '\n')], /the file is empty$/],
    [['--token-file', file('t2', 0o600), '--token', 'x'], /not both$/],
  ];
  for (const [extra, why] of cases) {
    const r = await sb.run(['status', '--address', '127.0.0.1:1', ...extra]);
    assert.is(r.code, 2, `${extra.join(' ')}: ${r.stderr}`);
    const lines = r.stderr.trim().split('\n');
    assert.match(lines[0]!, why);
  }
});

test.run();
