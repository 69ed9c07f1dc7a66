/**
 * A value one role hands another without the driver carrying it: inside a cluster the producing
 * role `put`s it once and the handoff holds the ref (the consumer fetches the bytes from the
 * producer); in one process (`--in-process`, tests, no runtime) it holds the value itself. Wrapped
 * in an object because a bare ref returned from an actor call would be awaited by the caller.
 *
 * @module
 */
import { get, ObjectRef, put, release } from '../runtime/api.ts';
import { isRtjobError } from '../runtime/errors.ts';

/** A value by reference (in a cluster) or by value (one process). */
export type Handoff<T> = { ref: ObjectRef<T> } | { value: T };

/** Puts `value` in this process's object store, or keeps it as is when no runtime runs here. */
export function handOff<T>(value: T): Handoff<T> {
  try {
    return { ref: put(value) };
  } catch (err) {
    if (isRtjobError(err, 'NOT_INITIALIZED')) return { value };
    throw err;
  }
}

/** The value of a handoff: fetched from its owner, or the value itself. */
export function receive<T>(h: Handoff<T>): Promise<T> {
  return 'ref' in h ? get(h.ref) : Promise.resolve(h.value);
}

/** The values of several handoffs, fetched at once, in order. */
export function receiveAll<T>(hs: readonly Handoff<T>[]): Promise<T[]> {
  return Promise.all(hs.map((h) => receive(h)));
}

/** Drops the caller's claim on a handoff's object (a no-op for a value). */
export function dropHandoff(h: Handoff<unknown>): void {
  if ('ref' in h && h.ref instanceof ObjectRef) release(h.ref);
}
