// `rtjob submit --working-dir DIR` brings DIR's npm dependencies (package-deps.ts): linked to the
// submitter's node_modules on its own machine, installed with npm elsewhere, a clear failure
// naming the package when they cannot be installed.
import { mkdirSync, mkdtempSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { provideDependencies } from '../../runtime/packages/package-deps.ts';
import { isRtjobError } from '../../runtime/errors.ts';
import { Sandbox } from './helpers.ts';

// The machine's npm cache (the sandbox's HOME is empty): kleur is one of the checkout's own
// (dev) dependencies, so it is there after `npm ci`.
const npmCache = process.env.npm_config_cache ?? join(homedir(), '.npm');
const sb = new Sandbox({ npm_config_cache: npmCache });
const base = mkdtempSync(join(tmpdir(), 'rtjob-deps-'));

/** A project whose entrypoint imports kleur (a dependency of its package.json). */
function project(name: string, deps: Record<string, string>): string {
  const dir = join(base, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify({ name, private: true, type: 'module', dependencies: deps }),
  );
  writeFileSync(
    join(dir, 'main.mjs'),
    "import kleur from 'kleur';\nconsole.log('kleur', typeof kleur.red);\n",
  );
  return dir;
}

test.before(async () => {
  await sb.startHead();
});
test.after(async () => {
  await sb.cleanup();
  rmSync(base, { recursive: true, force: true });
});

test('without node_modules beside it, the head installs the dependencies into the job', async () => {
  const dir = project('fresh', { kleur: '4.1.5' });
  const r = await sb.run(['submit', '--working-dir', dir, '--', 'node', 'main.mjs'], {
    cwd: dir,
    timeoutMs: 240_000,
  });
  assert.is(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /installing the working dir's dependencies \(kleur\)/);
  assert.match(r.stdout, /kleur function/);
});

test("the submitter's node_modules is linked on its own machine", async () => {
  const dir = project('linked', { kleur: '4.1.5' });
  // Any node_modules with kleur will do; the checkout's is one.
  const nm = join(dir, 'node_modules');
  mkdirSync(nm);
  const real = join(process.cwd(), 'node_modules', 'kleur');
  symlinkSync(real, join(nm, 'kleur'), 'dir');
  const r = await sb.run(['submit', '--working-dir', dir, '--', 'node', 'main.mjs'], {
    cwd: dir,
    timeoutMs: 120_000,
  });
  assert.is(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, /dependencies: linked to .*linked\/node_modules/);
  assert.match(r.stdout, /kleur function/);
});

test('a dependency that cannot be installed fails the job with its name', async () => {
  const dir = project('missing', { 'rtjob-no-such-package-3f9a2c': '1.0.0' });
  const r = await sb.run(['submit', '--working-dir', dir, '--', 'node', 'main.mjs'], {
    cwd: dir,
    timeoutMs: 240_000,
  });
  assert.is.not(r.code, 0);
  assert.match(r.stdout + r.stderr, /dependencies failed at rtjob-no-such-package-3f9a2c@1\.0\.0/);
});

test('provideDependencies: none without package.json; rtjob alone links the running rtjob', async () => {
  const none = join(base, 'none');
  mkdirSync(none);
  assert.is(await provideDependencies(none, { log: () => undefined }), 'none');
  const own = join(base, 'own');
  mkdirSync(own);
  writeFileSync(join(own, 'package.json'), JSON.stringify({ dependencies: { rtjob: '^0.1.0' } }));
  assert.is(await provideDependencies(own, { log: () => undefined }), 'linked');
  assert.ok(readlinkSync(join(own, 'node_modules', 'rtjob')).length > 0);
  const bad = join(base, 'bad');
  mkdirSync(bad);
  writeFileSync(join(bad, 'package.json'), '{ nope');
  try {
    await provideDependencies(bad, { log: () => undefined });
    assert.unreachable('bad package.json');
  } catch (err) {
    assert.ok(isRtjobError(err, 'DEPENDENCY_INSTALL'));
  }
});

test.run();
