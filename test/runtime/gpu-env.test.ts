import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { defineActor, init, shutdown } from '../../runtime/index.ts';
import type { Counter } from '../fixtures/runtime/counter.ts';
import { fixture } from './helpers.ts';

// A node that declares GPUs hands each worker exactly its own (see actors.test.ts); one that
// declares none manages none, so its workers see the GPUs the machine shows the agent.
const CounterActor = defineActor<typeof Counter>(fixture('counter.ts'), 'Counter');

test.before(async () => {
  process.env.CUDA_VISIBLE_DEVICES = '3';
  await init({ address: 'local', local: { node: { numCpus: 2, numGpus: 0 } } });
});
test.after(async () => {
  await shutdown();
  delete process.env.CUDA_VISIBLE_DEVICES;
});

test('workers of a node without declared GPUs keep the CUDA_VISIBLE_DEVICES they inherit', async () => {
  const c = CounterActor.remote(0);
  assert.is(await c.env.remote('CUDA_VISIBLE_DEVICES'), '3');
});

test.run();
