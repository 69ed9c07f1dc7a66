/**
 * Turns a job's entrypoint as the user wrote it into the argv the head runs, and checks that it
 * exists before the job is accepted.
 *
 * - a built-in name (`builtins`, handed in by whoever starts the head: the CLI passes `train_ppo`
 *   and `train_sft`): the driver file it names, run with the head's Node + tsx;
 * - `./script.ts …`, `x.mjs …`: a script file, run with the head's Node + tsx;
 * - `node script.ts …`: the head's Node (+ tsx for TypeScript);
 * - anything else: a command looked up on PATH (or a path to an executable);
 * - a single string: run by `/bin/sh -c`, as Ray does.
 *
 * @module
 */
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { delimiter, isAbsolute, join, resolve } from 'node:path';

import { OpsError } from './errors.ts';
import { checkoutNodeFlags } from '../../runtime/own-files.ts';

/**
 * `--import` value that makes a Node process run TypeScript: tsx by absolute URL, so it resolves
 * from any working directory (a bare `tsx` resolves against the cwd's node_modules).
 */
export const tsxImport: string = import.meta.resolve('tsx');

/** argv prefix that runs a script with this Node and tsx. */
export const nodeWithTsx: readonly string[] = [
  process.execPath,
  ...checkoutNodeFlags,
  '--import',
  tsxImport,
];

const scriptExt = /\.(ts|mts|cts|js|mjs|cjs)$/;

function isExecutable(p: string): boolean {
  try {
    accessSync(p, constants.X_OK);
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

function onPath(cmd: string, envPath: string): string | undefined {
  for (const dir of envPath.split(delimiter)) {
    if (dir && isExecutable(join(dir, cmd))) return join(dir, cmd);
  }
  return undefined;
}

/**
 * Resolves the argv to spawn, or throws `ENTRYPOINT_NOT_FOUND` with what was missing. `builtins`
 * maps a name to the script it runs; the runtime has none of its own.
 */
export function resolveEntrypoint(
  entrypoint: readonly string[] | string,
  cwd: string,
  envPath = process.env.PATH ?? '',
  builtins: Readonly<Record<string, string>> = {},
): string[] {
  if (typeof entrypoint === 'string') {
    if (!entrypoint.trim()) throw new OpsError('BAD_REQUEST', 'entrypoint is empty');
    return ['/bin/sh', '-c', entrypoint];
  }
  const [first, ...rest] = entrypoint;
  if (first === undefined || first === '') throw new OpsError('BAD_REQUEST', 'entrypoint is empty');
  const node = nodeWithTsx;
  const builtin = builtins[first];
  if (builtin !== undefined) {
    if (!existsSync(builtin)) {
      throw new OpsError(
        'ENTRYPOINT_NOT_FOUND',
        `built-in entrypoint ${first} is not available in this installation (${builtin} is missing)`,
      );
    }
    return [...node, builtin, ...rest];
  }
  if (first === 'node') {
    const script = rest.find((a) => !a.startsWith('-'));
    if (script !== undefined && scriptExt.test(script) && !existsSync(resolve(cwd, script))) {
      throw new OpsError(
        'ENTRYPOINT_NOT_FOUND',
        `entrypoint script not found: ${script} (in ${cwd})`,
      );
    }
    return [...node, ...rest];
  }
  if (scriptExt.test(first)) {
    const file = resolve(cwd, first);
    if (!existsSync(file)) {
      throw new OpsError(
        'ENTRYPOINT_NOT_FOUND',
        `entrypoint script not found: ${first} (in ${cwd})`,
      );
    }
    return [...node, file, ...rest];
  }
  if (first.includes('/')) {
    const file = isAbsolute(first) ? first : resolve(cwd, first);
    if (!isExecutable(file)) {
      throw new OpsError(
        'ENTRYPOINT_NOT_FOUND',
        `entrypoint is not an executable file: ${first} (in ${cwd})`,
      );
    }
    return [file, ...rest];
  }
  const found = onPath(first, envPath);
  if (!found) {
    throw new OpsError(
      'ENTRYPOINT_NOT_FOUND',
      `entrypoint command not found: ${first} (${builtinList(builtins)}not on PATH)`,
    );
  }
  return [found, ...rest];
}

function builtinList(builtins: Readonly<Record<string, string>>): string {
  const names = Object.keys(builtins);
  return names.length ? `not a built-in — ${names.join(', ')} — and ` : '';
}
