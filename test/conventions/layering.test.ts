// The folders are the parts, in one order: a folder imports only the folders before it (and
// itself). Relative imports, dynamic imports and `new URL(…, import.meta.url)` module paths all
// count. Examples import the package by its name, never a path into the tree. Two planes: the
// actor core (`runtime/`) imports nothing of the operator plane (`ops/`), which builds on the core
// alone; the package face at the root (`index.ts`) joins the two.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import {
  parts as layers,
  outsideParts,
  packageFaces,
  sourceFiles,
  topFolders,
  unlistedFolders,
} from './source-files.ts';

/** Folders outside the product but examples: they may import any part. */
const tools = new Set(outsideParts.filter((d) => d !== 'examples'));

const specifier = /(?:from\s+|import\(\s*|new URL\(\s*)['"](\.{1,2}\/[^'"]+)['"]/g;

/** Every relative import that crosses a folder, as `file -> target`. */
function crossings(): { from: string; to: string; line: string }[] {
  const out: { from: string; to: string; line: string }[] = [];
  for (const f of sourceFiles()) {
    for (const m of f.text.matchAll(specifier)) {
      const target = posix.normalize(posix.join(posix.dirname(f.path), m[1]!));
      const a = f.path.split('/')[0]!;
      const b = target.split('/')[0]!;
      if (a !== b) out.push({ from: f.path, to: target, line: m[0] });
    }
  }
  return out;
}

test('no part imports a part after it', () => {
  const bad: string[] = [];
  for (const c of crossings()) {
    const a = c.from.split('/')[0]!;
    const b = c.to.split('/')[0]!;
    if (tools.has(a) || a === 'examples' || packageFaces.includes(a)) continue;
    const ia = layers.indexOf(a);
    const ib = layers.indexOf(b);
    if (b === 'package.json' && a === 'cli') continue; // the version the CLI prints
    if (ia < 0 || ib < 0 || ib > ia) bad.push(`${c.from} -> ${c.to}`);
  }
  assert.equal(bad, [], `imports against the layering:\n${bad.join('\n')}`);
});

test('the operator plane builds on the runtime alone, and the runtime knows nothing of it', () => {
  const bad = crossings()
    .filter((c) => {
      const a = c.from.split('/')[0]!;
      const b = c.to.split('/')[0]!;
      if (a === 'ops') return b !== 'runtime';
      return a === 'runtime' && b === 'ops';
    })
    .map((c) => `${c.from} -> ${c.to}`);
  assert.equal(bad, [], `imports across the planes:\n${bad.join('\n')}`);
});

/** The parts the CLI reaches only through their face, `<part>/index.ts`. */
const cliFaces = ['runtime', 'ops', 'train'];

/** The CLI's imports of `cliFaces` parts that go past the part's `index.ts`. */
export function pastFaces(cs: readonly { from: string; to: string }[]): string[] {
  return cs
    .filter((c) => c.from.startsWith('cli/'))
    .filter((c) => {
      const part = c.to.split('/')[0]!;
      return cliFaces.includes(part) && c.to !== `${part}/index.ts`;
    })
    .map((c) => `${c.from} -> ${c.to}`);
}

test('the CLI reaches the runtime, the operator plane and train through their faces', () => {
  const bad = pastFaces(crossings());
  assert.equal(bad, [], `import these through the part's index.ts:\n${bad.join('\n')}`);
  // The rule sees an import into a part's files, static or dynamic, and lets the faces pass.
  assert.equal(
    pastFaces([
      { from: 'cli/a.ts', to: 'runtime/head/head.ts' },
      { from: 'cli/commands/b.ts', to: 'train/ppo/flags.ts' },
      { from: 'cli/c.ts', to: 'ops/jobs/x.ts' },
      { from: 'cli/d.ts', to: 'train/index.ts' },
      { from: 'cli/e.ts', to: 'gateway/serve.ts' },
      { from: 'ops/f.ts', to: 'runtime/env.ts' },
    ]),
    [
      'cli/a.ts -> runtime/head/head.ts',
      'cli/commands/b.ts -> train/ppo/flags.ts',
      'cli/c.ts -> ops/jobs/x.ts',
    ],
  );
  assert.ok(
    crossings().some((c) => c.from === 'cli/commands/jobs.ts' && c.to === 'train/index.ts'),
    'a dynamic import counts as a crossing',
  );
});

test('the package face at the root imports only the runtime and the operator plane', () => {
  const bad = crossings()
    .filter((c) => packageFaces.includes(c.from))
    .filter((c) => !['runtime', 'ops'].includes(c.to.split('/')[0]!))
    .map((c) => `${c.from} -> ${c.to}`);
  assert.equal(bad, [], bad.join('\n'));
  assert.ok(crossings().some((c) => c.from === 'index.ts' && c.to === 'ops/metrics.ts'));
});

/** Example imports of the tree that wait for a package export: the agent types for `rtjob/agent`. */
const pendingExports: readonly { file: string; target: RegExp }[] = [
  { file: 'examples/reflection.ts', target: /^agents\/types\.ts$/ },
  { file: 'examples/remax.ts', target: /^agents\/types\.ts$/ },
];

test('examples import the package by its name, never a path into the tree', () => {
  const bad = crossings()
    .filter((c) => c.from.startsWith('examples/'))
    .filter((c) => !pendingExports.some((p) => p.file === c.from && p.target.test(c.to)))
    .map((c) => `${c.from} -> ${c.to}`);
  assert.equal(bad, [], `examples reaching into the tree:\n${bad.join('\n')}`);
});

test('the layering lists every top-level folder that holds TypeScript', () => {
  assert.ok(topFolders().includes('runtime') && topFolders().includes('docs'));
  assert.equal(unlistedFolders(), [], 'folders that are no part and no tool');
  // The check sees a folder nobody listed, at any depth, and only one that holds TypeScript.
  const base = mkdtempSync(join(tmpdir(), 'rtjob-layering-'));
  try {
    for (const f of ['runtime/a.ts', 'stray/deep/x.ts', 'assets/logo.svg', 'node_modules/m/i.ts']) {
      mkdirSync(join(base, posix.dirname(f)), { recursive: true });
      writeFileSync(join(base, f), '');
    }
    assert.equal(unlistedFolders(base), ['stray']);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});

test.run();
