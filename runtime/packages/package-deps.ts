/**
 * A working dir's npm dependencies, as Ray's `runtime_env` gives a job its pip packages. An
 * uploaded working dir never carries `node_modules`; each machine that runs the job (the head for
 * the driver, every node for its workers) provides them once per package (content hash), before
 * the first process starts in it:
 *
 * 1. nothing to do when the package has no `package.json` dependencies, or already has
 *    `node_modules` (an earlier job with the same content);
 * 2. on the submitter's machine, `node_modules` links to the submitter's own (the exact tree the
 *    user ran with; `submit` passes its path as `RTJOB_SUBMITTER_MODULES`);
 * 3. elsewhere, `npm install --omit=dev --prefer-offline` of the `package.json` dependencies, from
 *    the registry that machine reaches (npm's cache first), with its output in the job's log.
 *
 * `rtjob` itself is never installed: `node_modules/rtjob` is the rtjob the cluster runs.
 *
 * @module
 */
import { spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { delimiter, dirname, join } from 'node:path';

import { RtjobError } from '../errors.ts';
import { ownModulePath, packageRoot } from '../own-files.ts';

/** A working dir's dependencies could not be installed; the message names the package. */
export class DependencyInstallError extends RtjobError<'DEPENDENCY_INSTALL'> {
  override get name(): string {
    return 'DependencyInstallError';
  }
  constructor(
    message: string,
    readonly packageName?: string,
  ) {
    super('DEPENDENCY_INSTALL', message);
  }
}

/**
 * The `dependencies` and `optionalDependencies` of `dir/package.json`, with rtjob itself left out
 * (`rtjob` says whether it was declared); undefined without a package.json.
 */
export function declaredDependencies(
  dir: string,
): { deps: Record<string, string>; rtjob: boolean } | undefined {
  const file = join(dir, 'package.json');
  if (!existsSync(file)) return undefined;
  let pkg: { dependencies?: Record<string, string>; optionalDependencies?: Record<string, string> };
  try {
    pkg = JSON.parse(readFileSync(file, 'utf8')) as typeof pkg;
  } catch (err) {
    throw new DependencyInstallError(
      `the working dir's package.json is not valid JSON: ${(err as Error).message}`,
    );
  }
  const deps = { ...pkg.dependencies, ...pkg.optionalDependencies };
  const rtjob = 'rtjob' in deps;
  delete deps.rtjob;
  return { deps, rtjob };
}

/** True when `dir` (an unpacked working dir) still needs {@link provideDependencies}. */
export function needsDependencies(dir: string): boolean {
  return !existsSync(join(dir, 'node_modules')) && existsSync(join(dir, 'package.json'));
}

/** Shell-quotes one word for `/bin/sh`. */
function shellWord(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * The driver's argv for a job whose working dir `dir` still needs its dependencies: a shell that
 * runs this module's script first (its output in the job's log), then execs the driver, which so
 * keeps the shell's pid.
 */
export function withDependencies(
  argv: readonly string[],
  dir: string,
  nodeFlags: readonly string[],
  submitterNodeModules: string | undefined,
): string[] {
  const script = ownModulePath('./install-deps.ts', import.meta.url);
  const first = [process.execPath, ...nodeFlags, script, dir, submitterNodeModules ?? '']
    .map(shellWord)
    .join(' ');
  return ['/bin/sh', '-c', `${first} && exec "$@"`, 'rtjob-driver', ...argv];
}

/** The package npm names in a failed install's output, if any. */
function failedPackage(out: string, deps: Record<string, string>): string | undefined {
  const m =
    /404 Not Found - GET \S+\/((?:@[^/\s]+\/)?[^/\s@]+)/.exec(out) ??
    /No matching version found for ((?:@[^/\s@]+\/)?[^@\s]+)@/.exec(out) ??
    /ENOTCACHED[^\n]*\/((?:@[^/\s%]+(?:\/|%2f))?[^/\s]+)\s*$/im.exec(out);
  const name = m?.[1]?.replace('%2f', '/');
  return name ?? Object.keys(deps).find((d) => out.includes(d));
}

/**
 * Gives `dir` its `node_modules` (see the module doc). `log` gets one line per step and npm's
 * output. Returns how they were provided.
 */
export async function provideDependencies(
  dir: string,
  opts: { submitterNodeModules?: string; log: (line: string) => void },
): Promise<'none' | 'present' | 'linked' | 'installed'> {
  if (existsSync(join(dir, 'node_modules'))) return 'present';
  const declared = declaredDependencies(dir);
  if (!declared) return 'none';
  const { deps } = declared;
  const linkRtjob = () => {
    const own = join(dir, 'node_modules', 'rtjob');
    if (existsSync(own)) return;
    mkdirSync(dirname(own), { recursive: true });
    symlinkSync(packageRoot, own, 'dir');
  };
  const theirs = opts.submitterNodeModules;
  if (theirs && existsSync(theirs)) {
    symlinkSync(theirs, join(dir, 'node_modules'), 'dir');
    opts.log(`rtjob: the working dir's dependencies: linked to ${theirs} (this machine)`);
    return 'linked';
  }
  if (Object.keys(deps).length === 0) {
    if (!declared.rtjob) return 'none';
    linkRtjob();
    return 'linked';
  }
  const names = Object.keys(deps);
  opts.log(
    `rtjob: installing the working dir's dependencies (${names.join(', ')}) with npm install --omit=dev`,
  );
  // In a private folder, renamed into place: jobs of the same package may install at once.
  const work = `${dir}.deps-${process.pid}-${Date.now()}`;
  mkdirSync(work, { recursive: true });
  try {
    writeFileSync(
      join(work, 'package.json'),
      JSON.stringify({ name: 'rtjob-working-dir', private: true, dependencies: deps }),
    );
    if (existsSync(join(dir, '.npmrc')))
      writeFileSync(join(work, '.npmrc'), readFileSync(join(dir, '.npmrc')));
    const out = await npmInstall(work, opts.log);
    if (out.code !== 0) {
      const name = failedPackage(out.text, deps);
      const tail = out.text.trim().split('\n').slice(-3).join(' / ');
      throw new DependencyInstallError(
        `installing the working dir's dependencies failed${name ? ` at ${name}@${deps[name] ?? ''}` : ''} (npm exited ${out.code}): ${tail}`,
        name,
      );
    }
    if (!existsSync(join(dir, 'node_modules')))
      renameSync(join(work, 'node_modules'), join(dir, 'node_modules'));
    linkRtjob();
    opts.log(`rtjob: installed ${names.length} dependencies into ${join(dir, 'node_modules')}`);
    return 'installed';
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

function npmInstall(
  cwd: string,
  log: (line: string) => void,
): Promise<{ code: number; text: string }> {
  return new Promise((resolve) => {
    const child = spawn(
      'npm',
      [
        'install',
        '--omit=dev',
        '--prefer-offline',
        '--no-package-lock',
        '--no-audit',
        '--no-fund',
        '--loglevel=warn',
      ],
      {
        cwd,
        // This Node first, so npm and packages' install scripts run on the Node rtjob runs on.
        env: {
          ...process.env,
          PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}`,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let text = '';
    const take = (b: Buffer) => {
      text += b.toString();
      for (const line of b.toString().split('\n')) if (line.trim()) log(`  npm: ${line}`);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.on('error', (err) => resolve({ code: 127, text: `cannot run npm: ${err.message}` }));
    child.on('close', (code) => resolve({ code: code ?? 1, text }));
  });
}

/**
 * `node install-deps.js DIR [SUBMITTER_NODE_MODULES]`: what a job's driver runs first, so the
 * install's output lands in the job's log.
 */
export async function installDepsMain(argv: readonly string[]): Promise<number> {
  const [dir, theirs] = argv;
  if (!dir) return 2;
  try {
    await provideDependencies(dir, {
      ...(theirs ? { submitterNodeModules: theirs } : {}),
      log: (l) => console.log(l),
    });
    return 0;
  } catch (err) {
    console.error(`rtjob: ${(err as Error).message}`);
    return 1;
  }
}
