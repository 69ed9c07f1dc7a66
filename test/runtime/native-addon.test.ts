// The N-API addon builder (runtime/native-addon.ts): builds once per source, says in one line
// what is missing, and keeps the compiler's last lines when a compile fails.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { type AddonSource, addonPath, buildAddon } from '../../runtime/native-addon.ts';

const dir = mkdtempSync(join(tmpdir(), 'rtjob-addon-'));
test.after(() => rmSync(dir, { recursive: true, force: true }));

/** A C addon whose `answer()` returns `n`, in its own folder. */
function source(name: string, n: number, body?: string): AddonSource {
  const file = join(dir, `${name}.c`);
  writeFileSync(
    file,
    body ??
      `#include <node_api.h>
static napi_value answer(napi_env env, napi_callback_info info) {
  napi_value v; napi_create_int32(env, ${n}, &v); return v;
}
NAPI_MODULE_INIT() {
  napi_value fn;
  napi_create_function(env, "answer", NAPI_AUTO_LENGTH, answer, NULL, &fn);
  napi_set_named_property(env, exports, "answer", fn);
  return exports;
}
`,
  );
  return {
    what: `the ${name} addon`,
    source: file,
    buildRoot: join(dir, 'build'),
    compiler: 'gcc',
    flags: ['-O1'],
  };
}

test('builds an addon once per source; a changed source builds anew', () => {
  const lines: string[] = [];
  const a = source('answer', 42);
  const path = buildAddon(a, { log: (l) => lines.push(l) });
  assert.is(path, addonPath(a));
  assert.is((createRequire(import.meta.url)(path) as { answer(): number }).answer(), 42);
  assert.is(lines.length, 2, 'building, built');
  assert.is(buildAddon(a, { log: (l) => lines.push(l) }), path);
  assert.is(lines.length, 2, 'the second call finds it built');
  const b = source('answer', 43);
  assert.is.not(addonPath(b), path, 'the source is in the key');
});

test('no compiler: one line that names it', () => {
  const a = source('nocc', 1);
  const saved = process.env.PATH;
  process.env.PATH = dir; // no gcc here
  try {
    assert.throws(
      () => buildAddon(a, { log: () => {} }),
      (e: Error & { code?: string }) =>
        e.code === 'ADDON_BUILD' && e.message === 'gcc not found (apt-get install gcc)',
    );
  } finally {
    process.env.PATH = saved;
  }
});

test('a failed compile keeps the compiler’s last lines', () => {
  const a = source('broken', 1, 'this is not C;\n');
  assert.throws(
    () => buildAddon(a, { log: () => {} }),
    (e: Error & { code?: string }) =>
      e.code === 'ADDON_BUILD' &&
      e.message.startsWith('the broken addon failed to compile:\n') &&
      /error/.test(e.message),
  );
});

test.run();
