// @ts-check
/**
 * Module hooks that let a worker import TypeScript at little more than the cost of plain
 * JavaScript. tsx costs a worker about 0.2 s of CPU and 35 MiB at start-up, which dominated
 * creating many actors; these hooks keep every transformed file in a content-addressed cache on
 * disk shared by all workers of a machine, so esbuild is loaded only on a miss (a file never
 * seen before, or changed since).
 *
 * Handles `.ts`, `.mts`, `.tsx` (and `.cts`, as CommonJS) with the `.js` → `.ts` and
 * extensionless resolution TypeScript users write. Plain JavaScript goes to Node untouched.
 * Written as JavaScript because it is what loads TypeScript; registered by `ts-loader.mjs`.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Bump when the transform options change, so stale cache entries are never read. */
const CACHE_VERSION = '1';
const tsExt = /\.(?:ts|mts|cts|tsx)$/;
const cacheDir =
  process.env.RTJOB_TS_CACHE_DIR || join(tmpdir(), `rtjob-ts-cache-${safeUid()}`);

function safeUid() {
  try {
    return String(userInfo().uid);
  } catch {
    return 'user';
  }
}

/** @type {typeof import('esbuild') | undefined} */
let esbuild;
/** @type {Map<string, { raw: Record<string, unknown>, key: string }>} */
const tsconfigByDir = new Map();
/** @type {Map<string, 'module' | 'commonjs'>} */
const typeByDir = new Map();

/**
 * The compiler options esbuild honours, from the nearest tsconfig.json (comments and trailing
 * commas allowed); `extends` is not followed.
 * @param {string} dir
 */
function tsconfigFor(dir) {
  const hit = tsconfigByDir.get(dir);
  if (hit) return hit;
  /** @type {{ raw: Record<string, unknown>, key: string }} */
  let found = { raw: {}, key: '' };
  try {
    const text = readFileSync(join(dir, 'tsconfig.json'), 'utf8');
    const json = JSON.parse(
      text.replace(/\/\*[\s\S]*?\*\/|("(?:\\.|[^"\\])*")|\/\/[^\n]*/g, (m, str) => str ?? '').replace(/,(\s*[}\]])/g, '$1'),
    );
    const co = json.compilerOptions ?? {};
    /** @type {Record<string, unknown>} */
    const keep = {};
    for (const k of [
      'experimentalDecorators',
      'useDefineForClassFields',
      'verbatimModuleSyntax',
      'preserveValueImports',
      'importsNotUsedAsValues',
      'jsx',
      'jsxFactory',
      'jsxFragmentFactory',
      'jsxImportSource',
      'target',
    ]) {
      if (co[k] !== undefined) keep[k] = co[k];
    }
    found = { raw: { compilerOptions: keep }, key: JSON.stringify(keep) };
  } catch (e) {
    const parent = dirname(dir);
    if (/** @type {NodeJS.ErrnoException} */ (e).code === 'ENOENT' && parent !== dir) found = tsconfigFor(parent);
  }
  tsconfigByDir.set(dir, found);
  return found;
}

/**
 * Whether `.ts` files in `dir` are ES modules: the nearest package.json's `type`, as Node
 * decides for `.js`.
 * @param {string} dir
 * @returns {'module' | 'commonjs'}
 */
function packageType(dir) {
  const hit = typeByDir.get(dir);
  if (hit) return hit;
  /** @type {'module' | 'commonjs'} */
  let type = 'commonjs';
  try {
    type = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).type === 'module' ? 'module' : 'commonjs';
  } catch (e) {
    const parent = dirname(dir);
    if (parent !== dir) type = packageType(parent);
  }
  typeByDir.set(dir, type);
  return type;
}

/**
 * Transforms one file, from the cache when the same source was seen before.
 * @param {string} path
 * @param {string} source
 * @param {'esm' | 'cjs'} format
 */
async function transform(path, source, format) {
  const tsconfig = tsconfigFor(dirname(path));
  const key = createHash('sha256')
    .update(`${CACHE_VERSION}\0${format}\0${path}\0${tsconfig.key}\0`)
    .update(source)
    .digest('hex')
    .slice(0, 40);
  const file = join(cacheDir, `${key}.js`);
  try {
    return readFileSync(file, 'utf8');
  } catch {}
  esbuild ??= await import('esbuild');
  const out = await esbuild.transform(source, {
    loader: path.endsWith('x') ? 'tsx' : 'ts',
    format,
    target: `node${process.versions.node.split('.')[0]}`,
    sourcemap: 'inline',
    sourcesContent: false,
    sourcefile: path,
    tsconfigRaw: /** @type {any} */ (tsconfig.raw),
  });
  try {
    mkdirSync(cacheDir, { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, out.code);
    renameSync(tmp, file); // atomic: a concurrent reader sees all or nothing
  } catch {}
  return out.code;
}

/** Candidates TypeScript would accept for a relative specifier Node cannot find. */
function alternatives(/** @type {string} */ specifier) {
  const m = /\.(m|c)?js$/.exec(specifier);
  if (m) {
    const base = specifier.slice(0, -m[0].length);
    return m[1] ? [`${base}.${m[1]}ts`] : [`${base}.ts`, `${base}.tsx`];
  }
  if (/\.[a-z]+$/i.test(specifier)) return [];
  return [`${specifier}.ts`, `${specifier}.tsx`, `${specifier}/index.ts`, `${specifier}.js`, `${specifier}/index.js`];
}

/** @type {import('node:module').ResolveHook} */
export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (e) {
    const relative = specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('file:');
    if (!relative || /** @type {NodeJS.ErrnoException} */ (e).code !== 'ERR_MODULE_NOT_FOUND') throw e;
    for (const alt of alternatives(specifier)) {
      try {
        return await next(alt, context);
      } catch {}
    }
    throw e;
  }
}

/** @type {import('node:module').LoadHook} */
export async function load(url, context, next) {
  if (!url.startsWith('file:') || !tsExt.test(new URL(url).pathname)) return next(url, context);
  const path = fileURLToPath(url);
  const source = readFileSync(path, 'utf8');
  const cjs = path.endsWith('.cts') || (!path.endsWith('.mts') && packageType(dirname(path)) === 'commonjs');
  return { format: cjs ? 'commonjs' : 'module', source: await transform(path, source, cjs ? 'cjs' : 'esm'), shortCircuit: true };
}
