// D14: `rtjob ... | head -1` — a reader that goes away mid-output must not crash the CLI with an
// EPIPE stack; the command finishes its work (here a private cluster runs the job and stops).
import { spawnSync } from 'node:child_process';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { Sandbox, binPath } from './helpers.ts';

test('output into a closed pipe: exit 0, no EPIPE stack', async () => {
  const box = new Sandbox();
  try {
    const r = spawnSync(
      'bash',
      [
        '-c',
        `set -o pipefail; "${process.execPath}" "${binPath}" submit -- sh -c 'seq 1 200000' | head -1`,
      ],
      {
        cwd: box.home,
        env: { ...process.env, HOME: box.home, RTJOB_HOME: `${box.home}/.rtjob` },
        encoding: 'utf8',
        timeout: 90_000,
      },
    );
    assert.is(r.stdout.trim(), '1');
    assert.not.match(r.stderr, /EPIPE/);
    assert.is(r.status, 0, r.stderr);
  } finally {
    await box.cleanup();
  }
});

test.run();
