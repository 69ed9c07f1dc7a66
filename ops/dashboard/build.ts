/**
 * Builds the dashboard: bundles `src/main.ts` (with uPlot) into `dist/app.js` with esbuild and
 * copies the page and styles next to it. Runs when a head starts and the sources are newer than
 * the last build (about 100 ms), so an install never needs a separate build step and the page
 * never loads anything from the network.
 *
 * @module
 */
import { build } from 'esbuild';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const srcDir = join(here, 'src');
const distDir = join(here, 'dist');
/** Modules outside `src/` that the bundle imports (pure, shared with the CLI). */
const sharedSources = [
  '../../runtime/format.ts',
  '../../runtime/errors.ts',
  '../http/contract.ts',
].map((f) => fileURLToPath(new URL(f, import.meta.url)));

function newestMtime(dir: string): number {
  let newest = 0;
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = statSync(p);
    newest = Math.max(newest, st.isDirectory() ? newestMtime(p) : st.mtimeMs);
  }
  return newest;
}

/** Builds when needed and returns the folder to serve. */
export async function buildDashboard(opts: { force?: boolean } = {}): Promise<string> {
  const stamp = join(distDir, 'app.js');
  // The installed package ships the bundle `npm run build` made, and no sources to rebuild from.
  if (!existsSync(srcDir) && existsSync(stamp)) return distDir;
  if (
    !opts.force &&
    existsSync(stamp) &&
    statSync(stamp).mtimeMs >=
      Math.max(newestMtime(srcDir), ...sharedSources.map((f) => statSync(f).mtimeMs))
  )
    return distDir;
  // Build into a private folder and swap it in, so heads starting together never see half a build.
  const tmp = `${distDir}.tmp-${process.pid}-${Date.now()}`;
  mkdirSync(tmp, { recursive: true });
  try {
    await build({
      entryPoints: [join(srcDir, 'main.ts')],
      bundle: true,
      format: 'esm',
      target: 'es2022',
      minify: true,
      sourcemap: false,
      outfile: join(tmp, 'app.js'),
      logLevel: 'silent',
    });
    copyFileSync(join(srcDir, 'index.html'), join(tmp, 'index.html'));
    copyFileSync(join(srcDir, 'style.css'), join(tmp, 'style.css'));
    // Linked from the page, so the browser never asks for a missing /favicon.ico.
    copyFileSync(join(srcDir, 'favicon.svg'), join(tmp, 'favicon.svg'));
    const uplotCss = createRequire(import.meta.url).resolve('uplot/dist/uPlot.min.css');
    copyFileSync(uplotCss, join(tmp, 'uplot.css'));
    const old = `${distDir}.old-${process.pid}-${Date.now()}`;
    if (existsSync(distDir)) renameSync(distDir, old);
    renameSync(tmp, distDir);
    rmSync(old, { recursive: true, force: true });
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    // Another head may have swapped in a fresh build meanwhile; use it.
    if (existsSync(stamp)) return distDir;
    throw err;
  }
  return distDir;
}
