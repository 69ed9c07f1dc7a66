// Plain Node ESM: no tsx, no TypeScript.
import { defineActor, init, shutdown } from 'rtjob';
import * as agent from 'rtjob/agent';
import { computeReturns } from 'rtjob/algorithms';
import { gsm8kReward } from 'rtjob/rewards';

console.log(
  'imports ok',
  [init, defineActor, shutdown, computeReturns, gsm8kReward].map((f) => typeof f).join(' '),
  Object.keys(agent).length,
);
