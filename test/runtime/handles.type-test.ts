/**
 * Compile-time checks of typed handles; checked by the project's `tsc --noEmit`. Every
 * `@ts-expect-error` line must fail to compile, so a loosened type breaks the type check.
 */
import {
  cancel,
  defineActor,
  defineTask,
  get,
  getActor,
  put,
  type ActorHandle,
  type ObjectRef,
  type ObjectRefGenerator,
} from '../../runtime/index.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import type { Streamer } from '../fixtures/runtime/streamer.ts';
import type { countTask, square } from '../fixtures/runtime/tasks.ts';

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

  // Streaming: the item type is inferred from the generator method.
  const S = defineActor<typeof Streamer>(url, 'Streamer');
  const st = S.options({ concurrencyGroups: { io: 4, compute: 1 } }).remote();
  const gen: ObjectRefGenerator<number> = st.count
    .options({ numReturns: 'streaming', generatorBackpressure: 4 })
    .remote(3);
  const letters: ObjectRefGenerator<string> = st.letters
    .options({ numReturns: 'streaming' })
    .remote('ab');
  const step = await gen.next();
  if (!step.done) {
    const ref: ObjectRef<number> = step.value;
    const item: number = await get(ref);
    void item;
    // @ts-expect-error the items are numbers
    const wrong: ObjectRef<string> = step.value;
    void wrong;
  }
  const next = await letters.next();
  if (!next.done) {
    const text: string = await next.value;
    void text;
  }
  // @ts-expect-error argument type of a streaming method
  st.count.options({ numReturns: 'streaming' }).remote('3');
  // @ts-expect-error a method that is not a generator cannot stream
  st.plain.options({ numReturns: 'streaming' }).remote(1);
  // @ts-expect-error only 'streaming' is a numReturns
  st.count.options({ numReturns: 2 });
  st.plain.options({ concurrencyGroup: 'io' }).remote(1);
  // @ts-expect-error a concurrency group is named by a string
  st.plain.options({ concurrencyGroup: 1 });
  // @ts-expect-error concurrency group sizes are numbers
  S.options({ concurrencyGroups: { io: 'four' } });
  S.options({ concurrencyGroups: { io: 4, compute: { maxConcurrency: 1, thread: true } } });
  // @ts-expect-error a group's thread option is a boolean
  S.options({ concurrencyGroups: { compute: { thread: 'yes' } } });
  const tgen: ObjectRefGenerator<number> = defineTask<typeof countTask>(url, 'countTask')
    .options({ numReturns: 'streaming' })
    .remote(2);
  // @ts-expect-error a task that is not a generator cannot stream
  sq.options({ numReturns: 'streaming' }).remote(2);
  const ok: boolean = await cancel(gen);
  await cancel(st.plain.remote(1), { force: true });
  // @ts-expect-error cancel takes a ref or a generator
  await cancel(st);
  void [ok, tgen];
}
