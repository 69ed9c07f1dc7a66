/**
 * ReMax as a workflow: per prompt, one sampled and one greedy completion; the sampled one is
 * trained with the reward difference (sampled − greedy) as its reward, so the greedy answer is the
 * baseline. Use with `--advantage-estimator reinforce --n-samples-per-prompt 1`.
 *
 *   npx rtjob submit -- train_ppo --agent-func ./examples/remax.ts --advantage-estimator reinforce --n-samples-per-prompt 1
 */
import { gsm8kReward } from 'rtjob/rewards';
import type { Sample, WorkflowEngine, WorkflowInit } from '../agents/types.ts';
import type { Trajectory } from 'rtjob/algorithms';

export class Workflow {
  constructor(private readonly init: WorkflowInit) {}

  async runEpisode(engine: WorkflowEngine, sample: Sample): Promise<Trajectory> {
    const [sampled, greedy] = await Promise.all([
      engine.generate({ inputIds: sample.promptIds, gconfig: { ...this.init.gconfig, n: 1 } }),
      engine.generate({
        inputIds: sample.promptIds,
        gconfig: { ...this.init.gconfig, n: 1, greedy: true },
      }),
    ]);
    const score = (ids: number[]): number =>
      gsm8kReward(this.init.tokenizer.decode(ids), sample.label ?? '');
    const p = sample.promptIds;
    return {
      inputIds: [...p, ...sampled.outputTokens],
      lossMask: [...p.map(() => 0), ...sampled.outputTokens.map(() => 1)],
      logprobs: [...p.map(() => 0), ...sampled.outputLogprobs],
      versions: [...p.map(() => -1), ...sampled.outputVersions],
      reward: score(sampled.outputTokens) - score(greedy.outputTokens),
      groupId: sample.groupId,
      truncated: sampled.stopReason === 'length',
      info: { greedy_reward: score(greedy.outputTokens) },
    };
  }
}
