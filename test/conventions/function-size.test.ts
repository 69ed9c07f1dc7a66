// Functions that read on one screen: no function in train/ is over 100 lines (a loop that needs
// more is a producer and a consumer over explicit state, or a few named steps). Counted by the
// TypeScript parser, from the first line of a function's declaration to its closing brace; a
// function nested in another counts on its own and inside its parent.
import ts from 'typescript';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { sourceFiles } from './source-files.ts';

/** The most lines a function in `train/` may span. */
const maxLines = 100;

/**
 * Offenders allowed for now, each with who removes it; the list only shrinks (a name here that is
 * no longer over the limit fails too, so it is taken off when it is split). Empty since issue #31
 * split `remoteRoles` and `openMlflow`: a new long function fails the first test.
 */
const allowed: Readonly<Record<string, string>> = {};

/** Every function of `text` longer than `max` lines: `name` (or `<anonymous>`) and its length. */
export function longFunctions(
  path: string,
  text: string,
  max: number,
): { name: string; lines: number }[] {
  const sf = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const out: { name: string; lines: number }[] = [];
  const nameOf = (n: ts.Node): string => {
    if (
      (ts.isFunctionDeclaration(n) || ts.isMethodDeclaration(n)) &&
      n.name !== undefined &&
      !ts.isComputedPropertyName(n.name)
    )
      return n.name.text;
    if (ts.isConstructorDeclaration(n)) return 'constructor';
    // `const f = () => …`, `f: function () {…}`: the name it is bound to.
    const p = n.parent;
    if (p && (ts.isVariableDeclaration(p) || ts.isPropertyAssignment(p)) && ts.isIdentifier(p.name))
      return p.name.text;
    return '<anonymous>';
  };
  const visit = (n: ts.Node): void => {
    if (ts.isFunctionLike(n) && 'body' in n && n.body !== undefined) {
      const first = sf.getLineAndCharacterOfPosition(n.getStart(sf)).line;
      const last = sf.getLineAndCharacterOfPosition(n.getEnd()).line;
      const lines = last - first + 1;
      if (lines > max) out.push({ name: nameOf(n), lines });
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

/**
 * What the rule finds in `files`: functions in `train/` over the limit and not in `allow`, and
 * names in `allow` that are no longer over it.
 */
export function sizeRule(
  files: readonly { path: string; text: string }[],
  allow: Readonly<Record<string, string>>,
): { over: string[]; done: string[] } {
  const found = new Map<string, number>();
  for (const f of files.filter((f) => f.path.startsWith('train/')))
    for (const { name, lines } of longFunctions(f.path, f.text, maxLines))
      found.set(`${f.path} ${name}`, lines);
  return {
    over: [...found].filter(([k]) => !(k in allow)).map(([k, n]) => `${k} (${n} lines)`),
    done: Object.keys(allow).filter((k) => !found.has(k)),
  };
}

test('no function in train/ is over 100 lines (but the listed ones, each with who splits it)', () => {
  const { over, done } = sizeRule(sourceFiles({ withFixtures: false }), allowed);
  assert.equal(over, [], `split these (or shorten them):\n${over.join('\n')}`);
  assert.equal(
    done,
    [],
    `no longer over ${maxLines} lines: take them off the list:\n${done.join('\n')}`,
  );
});

test('the rule fails on a new long function in train/, and on a stale allowance', () => {
  const body = Array.from({ length: 101 }, (_, i) => `  x += ${i};`).join('\n');
  const long = `export function loop(): void {\n  let x = 0;\n${body}\n}\n`;
  const files = [
    { path: 'train/ppo/new.ts', text: long },
    { path: 'roles/elsewhere.ts', text: long },
  ];
  assert.equal(sizeRule(files, {}), { over: ['train/ppo/new.ts loop (104 lines)'], done: [] });
  assert.equal(sizeRule(files, { 'train/ppo/new.ts loop': 'x', 'train/a.ts gone': 'y' }), {
    over: [],
    done: ['train/a.ts gone'],
  });
});

test('the scan finds a long function and measures it from its declaration to its brace', () => {
  const body = Array.from({ length: 101 }, (_, i) => `  x += ${i};`).join('\n');
  const text = `export function long(): void {\n  let x = 0;\n${body}\n}\nconst short = () => 1;\n`;
  assert.equal(longFunctions('a.ts', text, 100), [{ name: 'long', lines: 104 }]);
  assert.equal(longFunctions('a.ts', text, 104), []);
  const arrow = `const f = async () => {\n${body}\n};\n`;
  assert.equal(longFunctions('a.ts', arrow, 100), [{ name: 'f', lines: 103 }]);
});

test.run();
