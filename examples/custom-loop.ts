/**
 * A training loop written by hand on the library, without the train_ppo driver: a Rollout and a
 * Trainer as actors on the cluster, calling the methods train_ppo calls. Per step: the rollout
 * runs each prompt's group of agent episodes and hands the trajectories on by reference; the
 * trainer fetches them from the rollout, makes the experience there (here: GRPO-style group
 * advantages, no critic, no KL) and steps; the new weights reach the engine by reference too.
 * The driver never holds a token. Change the config to try another algorithm.
 *
 *   node -C rtjob-source --import tsx examples/custom-loop.ts [--steps 10] [--pretrain DIR]
 */
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { init, kill, shutdown } from 'rtjob';
import {
  dropHandoff,
  type ExperienceConfig,
  RolloutActor,
  tinyMathModelDir,
  TrainerActor,
} from 'rtjob/roles';
import { arithDataset, PromptSampler } from 'rtjob/train';

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

const data = new PromptSampler(arithDataset(), { input: 'prompt', label: 'solution' }, 1);
// How rewards become advantages: each group's rewards normalised by its mean and std.
const config: ExperienceConfig = {
  experience: { maxNewTokens },
  returns: { advantage: { estimator: 'group_norm', nSamplesPerPrompt: nSamples } },
};
try {
  for (let step = 1; step <= steps; step++) {
    // 1. A rollout batch: `prompts` groups of `nSamples` episodes, each reported with a
    //    reference to its trajectories (they stay in the rollout's object store).
    const groups = await Promise.all(data.next(prompts).map((it) => rollout.runGroup.remote(it)));
    const batches = groups.flatMap((g) => (g.status === 'ok' && g.batch ? [g.batch] : []));
    // 2. One trainer step: it fetches the batches, makes experience and advantages, and steps.
    const stats = await trainer.trainStep.remote({ batches, config, klCoef: 0 });
    for (const g of groups) if (g.batch) dropHandoff(g.batch);
    // 3. The new weights to the engine: the trainer puts them once and the rollout fetches them.
    const { weights } = await trainer.shareWeights.remote();
    await rollout.updateWeights.remote(weights);
    console.log(
      `step ${step}/${steps}  reward ${stats.rewardMean.toFixed(3)}  loss ${stats.policyLoss.toFixed(4)}  version ${stats.version}`,
    );
  }
} finally {
  await Promise.allSettled([kill(rollout), kill(trainer)]);
  await shutdown();
}
