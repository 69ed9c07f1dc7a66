import { readFileSync } from 'node:fs';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

test('package.json names the rtjob bin and is ESM', () => {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
  assert.is(pkg.name, 'rtjob');
  assert.is(pkg.type, 'module');
  assert.ok(pkg.bin.rtjob);
});

test.run();
