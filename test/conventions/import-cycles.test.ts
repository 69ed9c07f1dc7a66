// No import circles between files, type-only imports included: a circle means a type or helper
// lives in its consumer's file instead of its owner's. Relative static imports, re-exports and
// dynamic imports all count.
import { posix } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { sourceFiles } from './source-files.ts';

const specifier = /(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)['"](\.{1,2}\/[^'"]+)['"]/gm;

/** Each file's relative imports, as paths from the root. */
function importGraph(): Map<string, string[]> {
  const files = sourceFiles({ withFixtures: false });
  const known = new Set(files.map((f) => f.path));
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const to = new Set<string>();
    for (const m of f.text.matchAll(specifier)) {
      const target = posix.normalize(posix.join(posix.dirname(f.path), m[1]!));
      if (known.has(target) && target !== f.path) to.add(target);
    }
    graph.set(f.path, [...to]);
  }
  return graph;
}

/** Strongly connected components with more than one file (Tarjan). */
function circles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1) out.push(scc.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return out;
}

test('no file imports itself back through others', () => {
  const found = circles(importGraph()).map((c) => c.join(' ⇄ '));
  assert.equal(found, [], `import circles:\n${found.join('\n')}`);
});

test.run();
