/**
 * A training loop written by hand on the library, without the train_ppo driver: a Rollout and a
 * Trainer as actors on the cluster, then per step rollout batch → experience → trainer step →
 * weight update. Change any line to try another algorithm (here: GRPO-style group advantages).
 *
 *   node -C rtjob-source --import tsx examples/custom-loop.ts [--steps 10] [--pretrain DIR]
 */
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { init, kill, shutdown } from 'rtjob';
import { computeReturns, makeExperience } from 'rtjob/algorithms';
import { RolloutActor, tinyMathModelDir, type TrainSample, TrainerActor } from 'rtjob/roles';
import { builtinDataset, PromptSampler } from 'rtjob/train';

const { values: args } = parseArgs({
  options: {
    steps: { type: 'string', default: '10' },
    pretrain: {
      type: 'string',
      default: tinyMathModelDir,
    },
    prompts: { type: 'string', default: '16' },
    samples: { type: 'string', default: '4' },
    'max-new-tokens': { type: 'string', default: '48' },
  },
});
const steps = Number(args.steps);
const prompts = Number(args.prompts);
const nSamples = Number(args.samples);
const maxNewTokens = Number(args['max-new-tokens']);

await init();

const rollout = RolloutActor.options({ maxConcurrency: 1000 }).remote({
  pretrain: args.pretrain,
  agentFunc: fileURLToPath(new URL('./agent.ts', import.meta.url)),
  generateMaxLen: maxNewTokens,
  promptMaxLen: 64,
  nSamplesPerPrompt: nSamples,
});
const trainer = TrainerActor.options({ maxConcurrency: 1 }).remote({
  pretrain: args.pretrain,
  learningRate: 2e-4,
  trainBatchSize: prompts * nSamples,
  microTrainBatchSize: 16,
});
await Promise.all([rollout.ready.remote(), trainer.ready.remote()]);

const data = new PromptSampler(
  builtinDataset('arith') as unknown as Record<string, unknown>[],
  { input: 'prompt', label: 'solution' },
  1,
);
try {
  for (let step = 1; step <= steps; step++) {
    // 1. A rollout batch: `prompts` groups of `nSamples` agent episodes.
    const groups = await rollout.runGroups.remote(data.next(prompts));
    const trajectories = groups.filter((g) => g.status === 'ok').flatMap((g) => g.trajectories);
    // 2. Experience: token-aligned rows and group-normalised advantages (no critic, no KL).
    const samples = makeExperience(trajectories, { maxNewTokens });
    const batch = computeReturns(
      samples,
      {},
      { advantage: { estimator: 'group_norm', nSamplesPerPrompt: nSamples } },
    );
    const train: TrainSample[] = samples.map((s, i) => ({
      inputIds: s.inputIds,
      actionMask: s.actionMask,
      advantages: batch.advantages[i]!,
      oldLogprobs: s.behaviourLogprobs,
    }));
    // 3. One trainer step, then 4. the new weights to the engine.
    const stats = await trainer.train.remote(train);
    // By reference: the trainer puts the weights once and the engine fetches them from it.
    const { weights } = await trainer.shareWeights.remote();
    await rollout.updateWeights.remote(weights);
    const reward =
      trajectories.reduce((a, t) => a + t.reward, 0) / Math.max(1, trajectories.length);
    console.log(
      `step ${step}/${steps}  reward ${reward.toFixed(3)}  loss ${stats.policyLoss.toFixed(4)}  version ${stats.version}`,
    );
  }
} finally {
  await Promise.allSettled([kill(rollout), kill(trainer)]);
  await shutdown();
}
