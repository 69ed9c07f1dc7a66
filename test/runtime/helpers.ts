/** Shared helpers for the runtime suites. */
import { setTimeout as sleep } from 'node:timers/promises';

/** A fixture module's URL. */
export function fixture(name: string): URL {
  return new URL(`../fixtures/runtime/${name}`, import.meta.url);
}

/** Polls `cond` until it returns a truthy value or the deadline passes. */
export async function until<T>(cond: () => T | Promise<T>, timeoutMs = 10_000, what = 'condition'): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** Rejection of `p`, or a failure when it resolves. */
export async function rejection(p: PromiseLike<unknown>): Promise<Error & { code?: string; context?: Record<string, unknown>; remoteName?: string; remoteStack?: string }> {
  try {
    await p;
  } catch (e) {
    return e as Error & { code?: string };
  }
  throw new Error('expected a rejection');
}

export { pidAlive as alive } from '../../runtime/pid.ts';
