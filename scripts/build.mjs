#!/usr/bin/env node
// `npm run build` (and `prepack`): compiles the package into dist/ — JS, .d.ts and source maps
// from tsc (tsconfig.build.json; `.ts` import specifiers become `.js`) — and copies beside the
// compiled code the files it loads by path: the worker's TypeScript loader (for users' agent
// files), the native addons' sources (the shared-memory mapper's C and the torch backend's C++,
// built at first use), the shipped checkpoints and the prebuilt dashboard bundle.
import { spawnSync } from 'node:child_process';
import { cpSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = join(root, 'dist');

function run(args) {
  const r = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

rmSync(dist, { recursive: true, force: true });
run([join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json']);
for (const f of readdirSync(join(root, 'runtime', 'worker')).filter((f) => f.endsWith('.mjs')))
  cpSync(join(root, 'runtime', 'worker', f), join(dist, 'runtime', 'worker', f));
cpSync(join(root, 'cli', 'bin.js'), join(dist, 'cli', 'bin.js'));
// Native addons built from source at first use (or `rtjob build torch`), as better-sqlite3 ships its .cc.
// Every C/C++ source and header of the addons' folders, so a new file cannot be left behind.
for (const dir of ['runtime/client/addon', 'model/backends/torch/addon'])
  for (const f of readdirSync(join(root, dir)).filter((f) => /\.(c|cc|h)$/.test(f)))
    cpSync(join(root, dir, f), join(dist, dir, f));
cpSync(join(root, 'model', 'pretrained'), join(dist, 'model', 'pretrained'), { recursive: true });
run([
  '--import',
  'tsx',
  '--input-type=module',
  '-e',
  "await (await import('./ops/dashboard/build.ts')).buildDashboard({ force: true })",
]);
cpSync(join(root, 'ops', 'dashboard', 'dist'), join(dist, 'ops', 'dashboard', 'dist'), {
  recursive: true,
});
console.log('built dist/');
