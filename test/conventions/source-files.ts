/** The project's own source files, read once, for the suites that check a convention by grep. */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Repository root. */
export const root = fileURLToPath(new URL('../../', import.meta.url));

const skipDirs = new Set([
  'node_modules',
  'dist',
  'static',
  'results',
  'pretrained',
  'ckpt',
  'tmp',
]);

function walk(base: string, dir: string, out: string[]): string[] {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name.startsWith('.') || skipDirs.has(e.name)) continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) walk(base, p, out);
    else if (/\.(ts|mts|mjs|js)$/.test(e.name)) out.push(relative(base, p));
  }
  return out;
}

/** The top-level folders of `base` (dependencies, build outputs and dot-folders aside). */
export function topFolders(base = root): string[] {
  return readdirSync(base, { withFileTypes: true })
    .filter((e) => e.isDirectory() && !e.name.startsWith('.') && !skipDirs.has(e.name))
    .map((e) => e.name)
    .sort();
}

/**
 * The product's parts in their one written-down layering (shared/DESIGN.md, Layout): each imports
 * only the parts before it (`layering.test.ts`).
 */
export const parts: readonly string[] = [
  'runtime',
  'model',
  'engines',
  'algorithms',
  'rewards',
  'gateway',
  'agents',
  'roles',
  'ops',
  'train',
  'cli',
];

/** Files at the root: the package's `rtjob` face, over the runtime and the operator plane. */
export const packageFaces: readonly string[] = ['index.ts'];

/** Folders outside the product: examples a user copies, and tools that may import any part. */
export const outsideParts: readonly string[] = ['examples', 'bench', 'scripts', 'test'];

/**
 * Top-level folders of `base` that hold TypeScript but are neither a part nor outside the
 * product: code no layering rule covers (`layering.test.ts`).
 */
export function unlistedFolders(base = root): string[] {
  const listed = new Set([...parts, ...outsideParts]);
  return topFolders(base).filter(
    (d) => !listed.has(d) && walk(base, join(base, d), []).some((f) => /\.m?ts$/.test(f)),
  );
}

/** Whether `path` is product source (in one of the {@link parts}). */
export function isProduct(path: string): boolean {
  return parts.includes(path.split('/')[0]!);
}

/** A source file: its path from the root and its text. */
export interface SourceFile {
  path: string;
  text: string;
}

/**
 * Every `.ts`/`.mjs`/`.js` file in the project's folders, listed or not, fixtures included unless
 * `withFixtures` is false (fixtures model user code, which follows its own conventions).
 */
export function sourceFiles(opts: { withFixtures?: boolean } = {}): SourceFile[] {
  const files = [...packageFaces, ...topFolders().flatMap((d) => walk(root, join(root, d), []))];
  return files
    .filter((f) => opts.withFixtures !== false || !/(^|\/)fixtures\//.test(f))
    .map((path) => ({ path, text: readFileSync(join(root, path), 'utf8') }));
}

/** `path:line: text` for every line of `files` that matches `re`. */
export function grep(files: SourceFile[], re: RegExp): string[] {
  const hits: string[] = [];
  for (const f of files) {
    f.text.split('\n').forEach((line, i) => {
      if (re.test(line)) hits.push(`${f.path}:${i + 1}: ${line.trim()}`);
    });
  }
  return hits;
}

/** The code of a file with its comments and its quoted texts blanked out (line numbers kept). */
export function code(text: string): string {
  return text
    .replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, ' '))
    .replace(/(^|[^:'"`\\])\/\/.*$/gm, '$1')
    .replace(/'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"/g, "''");
}
