/**
 * Builds a small N-API addon from its source with the system compiler at first use: no
 * node-gyp, nothing downloaded. The built `.node` lands in an ignored folder beside the source,
 * keyed by the source, the build's inputs and the Node version, so a rebuild happens only when
 * one of them changes; processes that build at once each write their own temporary file and
 * rename it into place. The `torch` backend (libtorch, g++) and the shared-memory mapper of
 * `client/shm-map.ts` (C, gcc) are built this way.
 *
 * @module
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { RtjobError } from './errors.ts';

/** No compiler, no Node headers, or a failed compile: the message says which. */
export class AddonBuildError extends RtjobError<'ADDON_BUILD'> {
  override get name(): string {
    return 'AddonBuildError';
  }
  constructor(message: string, opts: { cause?: unknown } = {}) {
    super('ADDON_BUILD', message, opts);
  }
}

/** What to build. */
export interface AddonSource {
  /** The addon's name in messages (`the torch addon`). */
  what: string;
  /** The source file (`.c` or `.cc`). */
  source: string;
  /**
   * The addon's other files: sources (`.c`, `.cc`) are compiled with `source`, and every one
   * (headers too) is part of the build's key.
   */
  more?: string[];
  /** The ignored folder builds go to (one subfolder per key). */
  buildRoot: string;
  /** `gcc` for C, `g++` for C++. */
  compiler: 'gcc' | 'g++';
  /** Flags before the source (besides `-shared -fPIC` and Node's include directory). */
  flags: string[];
  /** Arguments after the output (libraries to link). */
  link?: string[];
  /** More of what the build depends on, for its key (e.g. the library it links). */
  key?: string;
}

/** Node's N-API headers: beside the running binary (official builds), else Debian's. */
export function nodeIncludeDir(): string | undefined {
  for (const d of [join(dirname(process.execPath), '..', 'include', 'node'), '/usr/include/node'])
    if (existsSync(join(d, 'node_api.h'))) return d;
  return undefined;
}

/** Where the addon of `a` is (or will be) built. */
export function addonPath(a: AddonSource): string {
  const key = createHash('sha256')
    .update(readFileSync(a.source))
    .update((a.more ?? []).map((f) => readFileSync(f, 'utf8')).join('\0'))
    .update(a.key ?? '')
    .update(JSON.stringify([a.compiler, a.flags, a.link ?? []]))
    .update(process.version)
    .digest('hex')
    .slice(0, 16);
  return join(a.buildRoot, key, `${basename(a.source).replace(/\.[^.]+$/, '')}.node`);
}

/**
 * Builds the addon of `a` unless it is already built for this source and key; returns its path.
 *
 * @param opts.log where the progress lines of a build go (default stderr; none when cached)
 * @throws AddonBuildError with a one-line reason when the compiler or Node's headers are
 *   missing, or the compile fails (its last lines in the message)
 */
export function buildAddon(
  a: AddonSource,
  opts: { log?: (line: string) => void; force?: boolean } = {},
): string {
  const log = opts.log ?? ((l: string): void => void process.stderr.write(`${l}\n`));
  const out = addonPath(a);
  if (existsSync(out) && !opts.force) return out;
  try {
    execFileSync(a.compiler, ['--version'], { stdio: 'ignore' });
  } catch {
    throw new AddonBuildError(`${a.compiler} not found (apt-get install ${a.compiler})`);
  }
  const include = nodeIncludeDir();
  if (!include)
    throw new AddonBuildError(
      'no node_api.h found (beside the node binary or in /usr/include/node)',
    );
  const tmp = `${out}.${process.pid}.tmp`;
  const sources = [a.source, ...(a.more ?? []).filter((f) => /\.cc?$/.test(f))];
  const args = [...a.flags, '-shared', '-fPIC', '-I', include, ...sources, '-o', tmp];
  log(`rtjob: building ${a.what} ...`);
  const started = Date.now();
  try {
    mkdirSync(dirname(out), { recursive: true });
    execFileSync(a.compiler, [...args, ...(a.link ?? [])], {
      stdio: ['ignore', 'ignore', 'pipe'],
      encoding: 'utf8',
    });
    renameSync(tmp, out);
  } catch (e) {
    rmSync(tmp, { force: true });
    const stderr = String((e as { stderr?: string }).stderr || (e as Error).message || e);
    const tail = stderr.trim().split('\n').slice(-8).join('\n');
    throw new AddonBuildError(`${a.what} failed to compile:\n${tail}`, { cause: e });
  }
  // Builds for an older source or other inputs are not used again.
  for (const d of readdirSync(a.buildRoot))
    if (d !== basename(dirname(out)))
      rmSync(join(a.buildRoot, d), { recursive: true, force: true });
  log(`rtjob: built ${out} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return out;
}
