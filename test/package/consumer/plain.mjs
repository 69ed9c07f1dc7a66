// Plain Node ESM: no tsx, no TypeScript.
import { existsSync } from 'node:fs';
import { defineActor, init, metrics, shutdown } from 'rtjob';
import * as agent from 'rtjob/agent';
import { computeReturns } from 'rtjob/algorithms';
import { gsm8kReward } from 'rtjob/rewards';
import { RolloutActor, TrainerActor, tinyMathModelDir } from 'rtjob/roles';
import { builtinDataset, PromptSampler } from 'rtjob/train';

console.log(
  'imports ok',
  [init, defineActor, shutdown, computeReturns, gsm8kReward].map((f) => typeof f).join(' '),
  Object.keys(agent).length,
);
// What a hand-written loop (examples/custom-loop.ts) takes from the package.
const sampler = new PromptSampler(
  builtinDataset('arith'),
  { input: 'prompt', label: 'solution' },
  1,
);
console.log(
  'loop faces',
  [RolloutActor.remote, TrainerActor.remote, metrics.log].map((f) => typeof f).join(' '),
  existsSync(`${tinyMathModelDir}/model.safetensors`),
  sampler.next(2).length,
);
