/**
 * The runtime quick start: `node --import tsx examples/actors/main.ts`. Starts an in-process
 * cluster (or joins RTJOB_ADDRESS), creates a counter actor in its own process, calls it, passes
 * it an object by reference, and shuts down.
 */
import { defineActor, get, init, put, shutdown } from 'rtjob';
import type { Counter } from './counter.ts';

await init();
const CounterActor = defineActor<typeof Counter>(
  new URL('./counter.ts', import.meta.url),
  'Counter',
);
const counter = CounterActor.options({ maxRestarts: 1 }).remote(10);

console.log('incr ->', await counter.incr.remote(5)); // 15
const refs = [1, 2, 3].map((by) => counter.incr.remote(by)); // pipelined, run in order
console.log('pipelined ->', await get(refs)); // [16, 18, 21]
const values = put(new Float32Array([0.5, 1.5, 2]));
console.log('total ->', await counter.total.remote(values)); // 25

await shutdown();
