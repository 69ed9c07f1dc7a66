/**
 * Compile-time checks of typed handles; checked by the project's `tsc --noEmit`. Every
 * `@ts-expect-error` line must fail to compile, so a loosened type breaks the type check.
 */
import { defineActor, defineTask, get, getActor, put, type ActorHandle, type ObjectRef } from '../../runtime/index.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import type { square } from '../fixtures/runtime/tasks.ts';

declare const url: URL;
const C = defineActor<typeof Counter>(url, 'Counter');

export async function checks(): Promise<void> {
  const c = C.options({ numCpus: 1, maxRestarts: 2 }).remote(10);
  C.remote();
  // @ts-expect-error constructor takes a number
  C.remote('ten');
  // @ts-expect-error too many constructor arguments
  C.remote(1, 2);

  const r: ObjectRef<number> = c.incr.remote(1);
  const n: number = await r;
  const m: number = await get(r);
  const [a, b] = await get([c.incr.remote(), c.slowIncr.remote(1, 2)] as const);
  const sum: number = a + b + n + m;
  void sum;
  c.incr.remote(put(5)); // a ref of the right type is accepted
  c.incr.options({ maxTaskRetries: 1 }).remote(2);

  // @ts-expect-error wrong argument type
  c.incr.remote('one');
  // @ts-expect-error a ref of the wrong type
  c.incr.remote(put('five'));
  // @ts-expect-error missing argument
  c.slowIncr.remote(1);
  // @ts-expect-error not a method: a field
  c.n.remote();
  // @ts-expect-error not a method: readonly field
  c.label.remote();
  // @ts-expect-error no such method
  c.nope.remote();
  // @ts-expect-error the result is a number, not a string
  const s: ObjectRef<string> = c.incr.remote(1);
  void s;
  // @ts-expect-error a handle is not thenable
  void c.then;
  // @ts-expect-error unknown option
  C.options({ numCPUs: 1 });

  const g: ActorHandle<Counter> = await getActor<typeof Counter>('c');
  g.incr.remote(1);

  const sq = defineTask<typeof square>(url, 'square');
  const q: ObjectRef<number> = sq.remote(3);
  void q;
  // @ts-expect-error task argument type
  sq.remote('3');
}
