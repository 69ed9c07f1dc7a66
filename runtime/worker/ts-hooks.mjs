// @ts-check
/**
 * Module hooks (run on Node's loader thread) that let a worker import TypeScript at little more
 * than the cost of plain JavaScript: transforms come from `ts-transform.mjs`'s cache. Handles
 * `.ts`, `.mts`, `.tsx` (and `.cts`, as CommonJS) with the `./x.js` → `./x.ts`, extensionless and
 * directory-index imports TypeScript users write. Plain JavaScript goes to Node untouched.
 * Registered by `ts-loader.mjs`.
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { isCommonJs, transformCached } from './ts-transform.mjs';

const tsExt = /\.(?:ts|mts|cts|tsx)$/;

/** Candidates TypeScript would accept for a relative specifier Node cannot find. */
function alternatives(/** @type {string} */ specifier) {
  const m = /\.(m|c)?js$/.exec(specifier);
  if (m) {
    const base = specifier.slice(0, -m[0].length);
    return m[1] ? [`${base}.${m[1]}ts`] : [`${base}.ts`, `${base}.tsx`];
  }
  if (/\.[a-z]+$/i.test(specifier)) return [];
  return [
    `${specifier}.ts`,
    `${specifier}.tsx`,
    `${specifier}/index.ts`,
    `${specifier}.js`,
    `${specifier}/index.js`,
  ];
}

/** @type {import('node:module').ResolveHook} */
export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (e) {
    const relative =
      specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('file:');
    const code = /** @type {NodeJS.ErrnoException} */ (e).code;
    if (!relative || (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'ERR_UNSUPPORTED_DIR_IMPORT'))
      throw e;
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
  const cjs = isCommonJs(path);
  return {
    format: cjs ? 'commonjs' : 'module',
    source: transformCached(path, readFileSync(path, 'utf8'), cjs ? 'cjs' : 'esm'),
    shortCircuit: true,
  };
}
