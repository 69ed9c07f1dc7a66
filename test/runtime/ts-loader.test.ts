// The workers' TypeScript loader (runtime/worker/ts-loader.mjs): transforms are cached by content
// on disk and shared, TypeScript's import spellings resolve, errors and stacks point at the source.
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

const loader = fileURLToPath(new URL('../../runtime/worker/ts-loader.mjs', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'rtjob-ts-loader-'));
const cacheDir = join(root, 'cache');
const app = join(root, 'app');

test.before(() => {
  mkdirSync(join(app, 'lib'), { recursive: true });
  writeFileSync(join(app, 'package.json'), '{ "type": "module" }');
  writeFileSync(
    join(app, 'tsconfig.json'),
    '{ /* comments are fine */ "compilerOptions": { "useDefineForClassFields": false, }, }',
  );
  writeFileSync(join(app, 'lib', 'index.ts'), 'export const fromIndex: string = "index";\n');
  writeFileSync(
    join(app, 'dep.ts'),
    'export enum Colour { Red = 1 }\nexport function twice(n: number): number { return n * 2; }\n',
  );
  writeFileSync(
    join(app, 'legacy.cts'),
    'const x: number = 41;\nmodule.exports = { answer: x + 1 };\n',
  );
  writeFileSync(
    join(app, 'main.ts'),
    [
      "import { Colour, twice } from './dep.js';", // TypeScript's spelling of ./dep.ts
      "import { fromIndex } from './lib';", // a directory's index.ts
      "import { createRequire } from 'node:module';",
      'const legacy = createRequire(import.meta.url)("./legacy.cts") as { answer: number };',
      'class Box { value!: number; }',
      "console.log(JSON.stringify({ twice: twice(21), red: Colour.Red, fromIndex, legacy: legacy.answer, defineFields: Object.hasOwn(new Box(), 'value') }));",
    ].join('\n'),
  );
  writeFileSync(join(app, 'broken.ts'), 'export const x: number = ;\n');
  writeFileSync(
    join(app, 'throws.ts'),
    'type T = { a: number };\n\n\nexport function boom(): T {\n  throw new Error("boom");\n}\nboom();\n',
  );
});

test.after(() => rmSync(root, { recursive: true, force: true }));

function run(file: string) {
  const r = spawnSync(process.execPath, ['--import', loader, join(app, file)], {
    env: { ...process.env, RTJOB_TS_CACHE_DIR: cacheDir },
    encoding: 'utf8',
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

test('runs TypeScript with its import spellings, honouring the tsconfig emit options', () => {
  const r = run('main.ts');
  assert.is(r.code, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout), {
    twice: 42,
    red: 1,
    fromIndex: 'index',
    legacy: 42,
    defineFields: false,
  });
});

test('transforms are cached by content: a second run reuses them, a change adds one entry', () => {
  const before = readdirSync(cacheDir).sort();
  assert.ok(before.length >= 3, 'main, dep and lib/index are cached');
  assert.is(run('main.ts').code, 0);
  assert.equal(readdirSync(cacheDir).sort(), before, 'nothing transformed again');
  writeFileSync(
    join(app, 'dep.ts'),
    'export enum Colour { Red = 2 }\nexport function twice(n: number): number { return n + n; }\n',
  );
  const r = run('main.ts');
  assert.is(JSON.parse(r.stdout).red, 2, 'the changed source is used, not a stale transform');
  assert.is(readdirSync(cacheDir).length, before.length + 1);
});

test('a cache directory other users may write to is not trusted: transforms stay in memory', () => {
  const shared = join(root, 'shared-cache');
  mkdirSync(shared, { mode: 0o777 });
  chmodSync(shared, 0o777);
  const r = spawnSync(process.execPath, ['--import', loader, join(app, 'main.ts')], {
    env: { ...process.env, RTJOB_TS_CACHE_DIR: shared },
    encoding: 'utf8',
  });
  assert.is(r.status, 0, r.stderr);
  assert.match(r.stderr, /not caching TypeScript transforms/);
  assert.equal(readdirSync(shared), [], 'nothing written to, or read from, a shared directory');
});

test('a syntax error names the file; a stack trace points at the TypeScript line', () => {
  const broken = run('broken.ts');
  assert.is.not(broken.code, 0);
  assert.match(broken.stderr, /broken\.ts/);
  const thrown = run('throws.ts');
  assert.is.not(thrown.code, 0);
  assert.match(thrown.stderr, /throws\.ts:5/);
});

test.run();
