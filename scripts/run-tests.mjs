#!/usr/bin/env node
// Runs every uvu suite (test/**/*.test.ts) in its own process, plus the type check, lint
// (eslint.config.js) and the format check (prettier --check), and ends with one line
// `N passed, N failed`. Usage: node scripts/run-tests.mjs [path-prefix...]
//   TEST_CONCURRENCY  processes at once (default 2)
//   TEST_TIMEOUT_S    per-file limit in seconds (default 900)
//   TEST_NO_TYPECHECK=1  skip the three whole-tree checks (tsc, lint, format)
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const filters = process.argv.slice(2).map((p) => relative(root, join(process.cwd(), p)));
const concurrency = Number(process.env.TEST_CONCURRENCY ?? 2);
const timeoutMs = Number(process.env.TEST_TIMEOUT_S ?? 900) * 1000;

function walk(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name.startsWith('.')) continue;
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...walk(p));
    else if (name.endsWith('.test.ts')) out.push(relative(root, p));
  }
  return out;
}

const files = walk(join(root, 'test'))
  .filter((f) => filters.length === 0 || filters.some((p) => f.startsWith(p)))
  .sort();

/** @type {{name: string, cmd: string[], kind: 'check' | 'uvu'}[]} */
const jobs = [];
if (filters.length === 0 && process.env.TEST_NO_TYPECHECK !== '1') {
  // Whole-tree checks pass or fail as one unit each, judged by the exit code.
  jobs.push({
    name: 'tsc --noEmit',
    cmd: ['node_modules/.bin/tsc', '--noEmit', '-p', '.'],
    kind: 'check',
  });
  jobs.push({ name: 'lint (eslint .)', cmd: ['node_modules/.bin/eslint', '.'], kind: 'check' });
  jobs.push({
    name: 'format (prettier --check .)',
    cmd: ['node_modules/.bin/prettier', '--check', '.'],
    kind: 'check',
  });
}
for (const f of files)
  jobs.push({
    name: f,
    // `rtjob-source`: `from 'rtjob/…'` resolves to the sources, not dist/ (package.json exports).
    cmd: [process.execPath, '--conditions=rtjob-source', '--import', 'tsx', f],
    kind: 'uvu',
  });

let passed = 0;
let failed = 0;
let skipped = 0;
const failures = [];

function parseUvu(out) {
  const clean = out.replace(/\x1b\[[0-9;]*m/g, '');
  const total = /Total:\s+(\d+)/.exec(clean);
  const ok = /Passed:\s+(\d+)/.exec(clean);
  const skip = /Skipped:\s+(\d+)/.exec(clean);
  if (!total || !ok) return null;
  return { total: +total[1], passed: +ok[1], skipped: skip ? +skip[1] : 0 };
}

function run(job) {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(job.cmd[0], job.cmd.slice(1), {
      cwd: root,
      env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {}
    }, timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      // Reap anything the suite left behind in its process group.
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {}
      const secs = ((Date.now() - started) / 1000).toFixed(1);
      let p = 0;
      let f = 0;
      let s = 0;
      if (job.kind === 'check') {
        if (code === 0) p = 1;
        else f = 1;
      } else {
        const r = parseUvu(out);
        if (r) {
          p = r.passed;
          s = r.skipped;
          f = Math.max(0, r.total - r.passed);
          if (code !== 0 && f === 0) f = 1; // crashed after the summary, or an unhandled error
        } else {
          f = 1;
        }
      }
      if (timedOut) f = Math.max(f, 1);
      passed += p;
      failed += f;
      skipped += s;
      const status = f > 0 ? 'FAIL' : 'ok  ';
      const why = timedOut
        ? ` (timed out after ${timeoutMs / 1000}s)`
        : signal
          ? ` (${signal})`
          : '';
      console.log(`${status} ${job.name}  ${p} passed, ${f} failed, ${s} skipped  ${secs}s${why}`);
      if (f > 0) failures.push({ name: job.name, out });
      resolve();
    });
  });
}

const queue = [...jobs];
await Promise.all(
  Array.from({ length: Math.max(1, concurrency) }, async () => {
    for (let job = queue.shift(); job; job = queue.shift()) await run(job);
  }),
);

for (const { name, out } of failures) {
  console.log(`\n===== ${name} =====\n${out.slice(-8000)}`);
}
if (jobs.length === 0) {
  console.log('no test files matched');
  failed += 1;
}
console.log(`\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(failed > 0 ? 1 : 0);
