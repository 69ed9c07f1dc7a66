import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { envVars, isEnvName, readEnv } from '../../runtime/env.ts';
import { grep, root, sourceFiles } from './source-files.ts';

// One environment convention: runtime/env.ts lists every RTJOB_*/ASYNC_* variable with its
// parser and doc, and all code reads them through readEnv.

/**
 * The one reader allowed outside the module, and why: the worker's TypeScript loader is what
 * loads TypeScript, so it cannot import runtime/env.ts.
 */
const allowed = new Map([['runtime/worker/ts-transform.mjs', 'RTJOB_TS_CACHE_DIR']]);

test('no process.env read of an RTJOB_/ASYNC_ variable outside runtime/env.ts', () => {
  const files = sourceFiles({ withFixtures: false }).filter((f) => f.path !== 'runtime/env.ts');
  const read = /process\.env(\.|\[\s*['"`])(RTJOB|ASYNC)_(\w+)\b(?!\s*=[^=])/;
  const hits = grep(files, read).filter((hit) => {
    if (/^\s*delete\s/.test(hit.slice(hit.indexOf(': ') + 2))) return false;
    const path = hit.slice(0, hit.indexOf(':'));
    const name = read.exec(hit)!.slice(2).join('_');
    return allowed.get(path) !== name;
  });
  assert.equal(hits, [], `read it with readEnv from runtime/env.ts:\n${hits.join('\n')}`);
});

test('every RTJOB_/ASYNC_ variable named in code or docs is in the table', () => {
  const docs = ['README.md', 'runtime/README.md', 'ops/README.md', 'algorithms/README.md']
    .concat(['train/ppo/README.md', 'bench/README.md', 'cli/README.md'])
    .flatMap((p) => {
      try {
        return [{ path: p, text: readFileSync(join(root, p), 'utf8') }];
      } catch {
        return [];
      }
    });
  const unknown = new Set<string>();
  for (const f of [...sourceFiles({ withFixtures: false }), ...docs]) {
    for (const m of f.text.matchAll(/\b(?:RTJOB|ASYNC)_[A-Z0-9]+(?:_[A-Z0-9]+)*\b/g)) {
      if (!isEnvName(m[0])) unknown.add(`${m[0]} (${f.path})`);
    }
  }
  assert.equal([...unknown], [], 'add them to envVars in runtime/env.ts');
});

test("runtime/README.md's table lists exactly the variables of the module", () => {
  const readme = readFileSync(join(root, 'runtime/README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Environment variables'));
  const rows = [...section.matchAll(/^\| `((?:RTJOB|ASYNC)_\w+)`\s*\|/gm)].map((m) => m[1]);
  assert.equal([...rows].sort(), Object.keys(envVars).sort());
});

test('readEnv parses, treats empty as unset, and names the variable in a bad value', () => {
  assert.is(readEnv('ASYNC_NUM_TASKS', { ASYNC_NUM_TASKS: ' 64 ' }), 64);
  assert.is(readEnv('ASYNC_NUM_TASKS', { ASYNC_NUM_TASKS: '' }), undefined);
  assert.is(readEnv('RTJOB_QUIET_BACKEND', { RTJOB_QUIET_BACKEND: '1' }), true);
  assert.equal(readEnv('RTJOB_JOB_ENV', { RTJOB_JOB_ENV: '{"A":"1"}' }), { A: '1' });
  assert.throws(
    () => readEnv('ASYNC_QUEUE_SIZE', { ASYNC_QUEUE_SIZE: '0' }),
    (e: Error & { code?: string }) =>
      e.code === 'INVALID_ARGUMENT' &&
      e.message === "ASYNC_QUEUE_SIZE: expected an integer >= 1, got '0'",
  );
  assert.throws(
    () => readEnv('RTJOB_LOG_LEVEL', { RTJOB_LOG_LEVEL: 'loud' }),
    /one of debug, info/,
  );
  assert.throws(() => readEnv('RTJOB_JOB_ENV', { RTJOB_JOB_ENV: '[1]' }), /JSON object of strings/);
});

test.run();
