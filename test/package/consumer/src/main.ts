// The README's "runtime on its own", as a user's project compiles it with `tsc --init` defaults.
import { defineActor, get, init, shutdown } from 'rtjob';
import type { AgentEnv, Sample, Trajectory, WorkflowEngine } from 'rtjob/agent';
import { computeReturns } from 'rtjob/algorithms';
import { gsm8kReward } from 'rtjob/rewards';
import type { Counter } from './counter.js';

await init();
const CounterActor = defineActor<typeof Counter>(
  new URL('./counter.js', import.meta.url),
  'Counter',
);
const c = CounterActor.options({ maxRestarts: 1 }).remote(10);
const n: number = await get(c.incr.remote(1));
// @ts-expect-error the handle is typed from Counter.incr
void c.incr.remote('five');
console.log('incr ->', n, gsm8kReward('The answer is 4', '4'), typeof computeReturns);
await shutdown();

export type Used = [Sample, Trajectory, AgentEnv, WorkflowEngine];
