// Every import the docs show (`from 'rtjob'`, `from 'rtjob/algorithms'`, …) resolves through the
// package's exports and yields the names it imports.
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { root } from './source-files.ts';

/** Every Markdown file of the project (READMEs of each folder, docs/). */
function markdown(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name.startsWith('.') || e.name === 'node_modules' || e.name === 'pretrained') continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) markdown(p, out);
    else if (e.name.endsWith('.md')) out.push(relative(root, p));
  }
  return out;
}
const docs = markdown(root).filter((f) => !f.startsWith('test/'));

test('every documented rtjob import resolves and exports what it names', async () => {
  const seen: string[] = [];
  for (const file of docs) {
    const text = readFileSync(join(root, file), 'utf8');
    for (const m of text.matchAll(
      /import\s+(?:type\s+)?\{([^}]*)\}\s+from\s+'(rtjob(?:\/[^']*)?)'/g,
    )) {
      const names = m[1]!
        .split(',')
        .map(
          (n) =>
            n
              .trim()
              .replace(/^type\s+/, '')
              .split(/\s+as\s+/)[0]!,
        )
        .filter(Boolean);
      const spec = m[2]!;
      let mod: Record<string, unknown>;
      try {
        mod = (await import(spec)) as Record<string, unknown>;
      } catch (err) {
        assert.unreachable(`${file}: import from '${spec}' fails: ${(err as Error).message}`);
        return;
      }
      const typeOnly = /import\s+type/.test(m[0]);
      for (const n of typeOnly ? [] : names) {
        // Types have no runtime value; a name starting with a capital may be one (interfaces).
        if (!(n in mod) && !/^[A-Z]/.test(n))
          assert.unreachable(`${file}: '${spec}' has no export ${n}`);
      }
      seen.push(spec);
    }
  }
  assert.ok(seen.includes('rtjob'), 'the README imports from rtjob');
});

test.run();
