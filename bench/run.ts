/**
 * `npm run bench [-- name...]`: runs bench/<name>.ts for each name (all when none is given), each in
 * its own process so one benchmark's memory and threads never colour another's numbers. Each
 * benchmark prints its table and writes bench/results/<name>.json.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const all = ['runtime', 'model', 'rl', 'gateway'];
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
  const r = spawnSync(process.execPath, ['--import', 'tsx', file], { stdio: 'inherit' });
  if (r.status !== 0) failed++;
}
process.exit(failed ? 1 : 0);
