// @ts-check
/**
 * TypeScript → JavaScript for worker processes, cached on disk by content. tsx costs a worker
 * about 0.2 s of CPU and 35 MiB at start-up, which dominated creating many actors; here every
 * transformed file is kept in a content-addressed cache shared by all workers of a machine
 * (`RTJOB_TS_CACHE_DIR`, default `$TMPDIR/rtjob-ts-cache-<uid>`), so esbuild is loaded only for a
 * file never seen before (or changed since). Emit options come from the nearest tsconfig.json.
 * Written as JavaScript because it is what loads TypeScript.
 *
 * @module
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir, userInfo } from 'node:os';
import { dirname, join } from 'node:path';

/** Bump when the transform options change, so stale cache entries are never read. */
const CACHE_VERSION = '1';
const cacheDir =
  process.env.RTJOB_TS_CACHE_DIR || join(tmpdir(), `rtjob-ts-cache-${safeUid()}`);
/** Whether `cacheDir` is safe to use; decided once. */
let cacheUsable;

function safeUid() {
  try {
    return String(userInfo().uid);
  } catch {
    return 'user';
  }
}

/**
 * The cache holds code this process will run, so it must be ours alone: created 0700, and
 * refused (transforms then stay in memory) when another user owns it or may write to it, as
 * anyone can pre-create a directory under a shared /tmp.
 */
function cacheReady() {
  if (cacheUsable !== undefined) return cacheUsable;
  try {
    mkdirSync(cacheDir, { recursive: true, mode: 0o700 });
    const st = statSync(cacheDir);
    cacheUsable = st.isDirectory() && (process.getuid === undefined || st.uid === process.getuid()) && (st.mode & 0o022) === 0;
  } catch {
    cacheUsable = false;
  }
  if (!cacheUsable) process.emitWarning(`rtjob: not caching TypeScript transforms in ${cacheDir} (not a private directory of this user)`);
  return cacheUsable;
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
  } catch {
    const parent = dirname(dir);
    if (parent !== dir) type = packageType(parent);
  }
  typeByDir.set(dir, type);
  return type;
}

/**
 * Whether a TypeScript file is CommonJS: `.cts`, or `.ts`/`.tsx` under a package.json without
 * `"type": "module"` (as Node decides for `.js`, and as tsx does).
 * @param {string} path
 */
export function isCommonJs(path) {
  if (path.endsWith('.cts')) return true;
  return !path.endsWith('.mts') && packageType(dirname(path)) === 'commonjs';
}

/**
 * Transforms one file, from the cache when the same source was seen before. Synchronous, so
 * `require()` can use it too; esbuild is loaded only on a miss.
 * @param {string} path
 * @param {string} source
 * @param {'esm' | 'cjs'} format
 * @returns {string}
 */
export function transformCached(path, source, format) {
  const tsconfig = tsconfigFor(dirname(path));
  const key = createHash('sha256')
    .update(`${CACHE_VERSION}\0${format}\0${path}\0${tsconfig.key}\0`)
    .update(source)
    .digest('hex')
    .slice(0, 40);
  const file = join(cacheDir, `${key}.js`);
  const cached = cacheReady();
  if (cached) {
    try {
      return readFileSync(file, 'utf8');
    } catch {}
  }
  esbuild ??= /** @type {typeof import('esbuild')} */ (createRequire(import.meta.url)('esbuild'));
  const out = esbuild.transformSync(source, {
    loader: path.endsWith('x') ? 'tsx' : 'ts',
    format,
    target: `node${process.versions.node.split('.')[0]}`,
    sourcemap: 'inline',
    sourcesContent: false,
    sourcefile: path,
    tsconfigRaw: /** @type {any} */ (tsconfig.raw),
  });
  if (!cached) return out.code;
  try {
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, out.code);
    renameSync(tmp, file); // atomic: a concurrent reader sees all or nothing
  } catch {}
  return out.code;
}

