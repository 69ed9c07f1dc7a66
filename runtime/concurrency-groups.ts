/**
 * An actor's concurrency groups as the user gives them (`ActorOptions.concurrencyGroups`: a
 * number, or `{ maxConcurrency, thread }`) turned into their wire form: each group's limit, and
 * the groups that run on a thread of their own.
 *
 * @module
 */
import { InvalidArgumentError } from './errors.ts';
import type { ActorOptions } from './handles.ts';
import type { ActorOptionsWire } from './protocol.ts';

/** The wire fields for `groups` (none when there are none); bad limits throw. */
export function concurrencyGroupsWire(
  groups: ActorOptions['concurrencyGroups'],
): Pick<ActorOptionsWire, 'concurrencyGroups' | 'threadGroups'> {
  const limits: Record<string, number> = {};
  const threadGroups: string[] = [];
  for (const [g, v] of Object.entries(groups ?? {})) {
    const n = typeof v === 'number' ? v : (v?.maxConcurrency ?? 1);
    if (!Number.isInteger(n) || n < 1) {
      throw new InvalidArgumentError(
        `concurrency group '${g}' must allow a whole number ≥ 1 of calls`,
      );
    }
    limits[g] = n;
    if (typeof v === 'object' && v?.thread) {
      if (g === 'default') {
        throw new InvalidArgumentError(
          "the default concurrency group runs on the worker's main thread; name another group",
        );
      }
      threadGroups.push(g);
    }
  }
  return {
    ...(Object.keys(limits).length > 0 ? { concurrencyGroups: limits } : {}),
    ...(threadGroups.length > 0 ? { threadGroups } : {}),
  };
}
