/**
 * Loads the code a worker hosts: imports the user's module by absolute URL (`.ts` through tsx),
 * finds the named export, and constructs the actor. Every failure becomes an `ActorLoadError`
 * that carries the original error, so creation fails with the reason instead of hanging.
 *
 * @module
 */
import { pathToFileURL } from 'node:url';
import { readEnv } from '../env.ts';
import { ActorLoadError, TaskError } from '../errors.ts';
import { ObjectRef } from '../client/object-ref.ts';
import { unpack, type WorkerAssignment } from '../protocol.ts';
import type { MethodLookup } from './executor.ts';

/**
 * A module inside the job's working dir, named by where the package lies on the machine that
 * created the actor (the head, or another node), at this node's own copy of the package.
 */
export function localModuleUrl(url: string, env: NodeJS.ProcessEnv = process.env): string {
  const hash = readEnv('RTJOB_PACKAGE', env);
  const dir = readEnv('RTJOB_WORKING_DIR', env);
  if (!hash || !dir || !url.startsWith('file:')) return url;
  const marker = `/packages/${hash}/`;
  const at = url.indexOf(marker);
  return at < 0 ? url : `${pathToFileURL(dir).href}/${url.slice(at + marker.length)}`;
}

async function importModule(url: string, actorId: string): Promise<Record<string, unknown>> {
  try {
    return (await import(localModuleUrl(url))) as Record<string, unknown>;
  } catch (e) {
    throw new ActorLoadError(`cannot import ${url}: ${(e as Error).message ?? e}`, {
      context: { actorId, moduleUrl: url },
      cause: e,
    });
  }
}

function exportOf(
  mod: Record<string, unknown>,
  url: string,
  name: string,
  actorId: string,
): unknown {
  const v = mod[name];
  if (typeof v !== 'function') {
    const names = Object.keys(mod).join(', ') || 'nothing';
    throw new ActorLoadError(
      `${url} has no ${v === undefined ? '' : 'callable '}export '${name}' (it exports: ${names})`,
      { context: { actorId, moduleUrl: url, exportName: name } },
    );
  }
  // A function, typed `unknown` because the caller decides whether it is a class or a task.
  return v;
}

/** The actor's constructor arguments, top-level refs resolved. */
export async function constructorArgs(a: WorkerAssignment): Promise<unknown[]> {
  const args = unpack(a.ctorArgs) as unknown[];
  for (let i = 0; i < args.length; i++) if (args[i] instanceof ObjectRef) args[i] = await args[i];
  return args;
}

/**
 * Imports `spec`'s module and constructs its class with `args` (also on a concurrency group's
 * own thread); returns how to find the instance's methods.
 */
export async function constructActor(
  spec: { moduleUrl: string; exportName: string },
  args: unknown[],
  actorId: string,
): Promise<MethodLookup> {
  const { moduleUrl, exportName } = spec;
  const Cls = exportOf(await importModule(moduleUrl, actorId), moduleUrl, exportName, actorId);
  let instance: Record<string, unknown>;
  try {
    instance = new (Cls as new (...x: unknown[]) => Record<string, unknown>)(...args);
  } catch (e) {
    throw new ActorLoadError(
      `the constructor of ${exportName} threw: ${(e as Error).message ?? e}`,
      {
        context: { actorId },
        cause: e,
      },
    );
  }
  return (method) => {
    const fn = method === 'constructor' ? undefined : instance[method];
    if (typeof fn !== 'function') {
      throw new TaskError('TypeError', `actor ${exportName} has no method '${method}'`, {
        context: { actorId, method },
      });
    }
    return { fn: fn as (...x: unknown[]) => unknown, self: instance };
  };
}

/**
 * A task runner: each call names `<moduleUrl>#<exportName>`; modules are imported once and
 * cached. Import failures reach the caller of that task.
 */
export function taskRunner(
  actorId: string,
): MethodLookup & { prepare(method: string): Promise<void> } {
  const modules = new Map<string, Record<string, unknown>>();
  const loading = new Map<string, Promise<void>>();
  const lookup = ((method: string) => {
    const hash = method.lastIndexOf('#');
    const url = method.slice(0, hash);
    const mod = modules.get(url);
    if (!mod)
      throw new TaskError('Error', `task module ${url} is not loaded`, { context: { actorId } });
    return {
      fn: exportOf(mod, url, method.slice(hash + 1), actorId) as (...x: unknown[]) => unknown,
      self: undefined,
    };
  }) as MethodLookup & { prepare(method: string): Promise<void> };
  lookup.prepare = (method: string) => {
    const url = method.slice(0, method.lastIndexOf('#'));
    if (modules.has(url)) return Promise.resolve();
    let p = loading.get(url);
    if (!p) {
      p = importModule(url, actorId).then((m) => void modules.set(url, m));
      loading.set(url, p);
      p.catch(() => loading.delete(url));
    }
    return p;
  };
  return lookup;
}
