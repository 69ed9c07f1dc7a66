// `rtjob diagnose JOB` reads a finished job's metrics and config from its session and prints the
// verdict (the judging itself is tested in test/train/diagnose.test.ts).
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { Sandbox } from './helpers.ts';

const fixtures = fileURLToPath(new URL('./fixtures/', import.meta.url));
const sb = new Sandbox();
test.after(() => sb.cleanup());

test('rtjob diagnose names the side, the bound and the setting to change first', async () => {
  const r = await sb.run(
    ['submit', '--job-id', 'diag1', '--', join(fixtures, 'queue-bound-run.ts')],
    { timeoutMs: 300_000 },
  );
  assert.is(r.code, 0, r.stderr);
  const d = await sb.run(['diagnose', 'diag1']);
  assert.is(d.code, 0, d.stderr);
  assert.match(d.stdout, /^job diag1: 4 step\(s\) analysed \(async\), median step 3\.05 s$/m);
  assert.match(d.stdout, /^limited by: queue, 33% of the wall-clock$/m);
  assert.match(d.stdout, /^change first: --async-queue-size 2: both sides wait on each other/m);
  const json = JSON.parse((await sb.run(['diagnose', 'diag1', '--json'])).stdout);
  assert.is(json.limit, 'queue');
  const none = await sb.run(['diagnose', 'nosuchjob']);
  assert.is.not(none.code, 0);
  assert.match(none.stderr.trim().split('\n').at(-1)!, /^rtjob: no job with id nosuchjob$/);
});

test.run();
