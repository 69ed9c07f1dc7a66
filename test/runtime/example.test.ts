import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

test('the runtime quick start example runs end to end', async () => {
  const main = fileURLToPath(new URL('../../examples/actors/main.ts', import.meta.url));
  // A fresh HOME: no ~/.rtjob/cluster.json, so init() starts its own in-process cluster.
  const home = mkdtempSync(join(tmpdir(), 'rtjob-example-'));
  const env: NodeJS.ProcessEnv = { ...process.env, HOME: home };
  delete env.RTJOB_ADDRESS;
  delete env.RTJOB_TOKEN;
  delete env.RTJOB_HOME;
  let stdout: string;
  try {
    ({ stdout } = await promisify(execFile)(
      process.execPath,
      // The example imports 'rtjob' by name: the checkout's sources, not dist/.
      ['--conditions=rtjob-source', '--import', 'tsx', main],
      {
        env,
        timeout: 60_000,
      },
    ));
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
  assert.match(stdout, /incr -> 15/);
  assert.match(stdout, /pipelined -> \[ 16, 18, 21 \]/);
  assert.match(stdout, /total -> 25/);
});

test.run();
