/**
 * `npm run bench [-- name...]`: runs bench/<name>.ts for each name (all when none is given), each in
 * its own process so one benchmark's memory and threads never colour another's numbers. Each
 * benchmark prints its table and writes bench/results/<name>.json.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { largePageMallocEnv } from '../runtime/client/shm.ts';

const all = [
  'runtime',
  'model',
  'rl',
  'gateway',
  'engines',
  'lora-sync',
  'torch',
  'driver',
  'collective',
  'weight-sync',
];
const names = process.argv.slice(2).filter((a) => !a.startsWith('-'));
let failed = 0;
for (const name of names.length ? names : all) {
  const file = fileURLToPath(new URL(`./${name}.ts`, import.meta.url));
  if (!existsSync(file)) {
    console.error(`bench: no benchmark named '${name}' (known: ${all.join(', ')})`);
    failed++;
    continue;
  }
  console.log(`\n## ${name}\n`);
  // The runtime benchmark's driver gets what rtjob gives the drivers and workers it starts:
  // large allocations backed by huge pages (runtime/client/shm.ts, largePageMallocEnv).
  const env =
    name === 'runtime'
      ? { ...process.env, GLIBC_TUNABLES: largePageMallocEnv(process.env.GLIBC_TUNABLES) }
      : process.env;
  const r = spawnSync(process.execPath, ['--import', 'tsx', file], { stdio: 'inherit', env });
  if (r.status !== 0) failed++;
}
process.exit(failed ? 1 : 0);
