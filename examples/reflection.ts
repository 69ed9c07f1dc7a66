/**
 * AReaL's reflection workflow: each of the n samples of a prompt answers, and while it is wrong it
 * is asked to reflect and try again, up to `maxTurns`; the reward of a right answer is discounted
 * by `turnDiscount` per retry. Returns the whole group, for GRPO (`--advantage-estimator
 * group_norm`).
 *
 *   npx rtjob submit -- train_ppo --agent-func ./examples/reflection.ts --advantage-estimator group_norm
 */
import { gsm8kReward } from 'rtjob/rewards';
import type { Sample, WorkflowEngine, WorkflowInit } from '../agents/types.ts';
import type { Trajectory } from 'rtjob/algorithms';

export class Workflow {
  readonly maxTurns = 2;
  readonly turnDiscount = 0.6;
  /** An answer cut off by the token limit: worse than a wrong one, so the policy keeps ending its answers. */
  readonly truncatedReward = -1;
  private readonly reflectIds: number[];

  constructor(private readonly init: WorkflowInit) {
    // Tokenized once, appended as ids: no decode → encode drift.
    this.reflectIds = init.tokenizer.applyChatTemplate([
      { role: 'user', content: 'Not correct. Check the sum and answer again.' },
    ]);
  }

  async runEpisode(engine: WorkflowEngine, sample: Sample): Promise<Trajectory[]> {
    return Promise.all(Array.from({ length: sample.nSamples }, () => this.one(engine, sample)));
  }

  private async one(engine: WorkflowEngine, sample: Sample): Promise<Trajectory> {
    const t: Trajectory = {
      inputIds: [...sample.promptIds],
      lossMask: sample.promptIds.map(() => 0),
      logprobs: sample.promptIds.map(() => 0),
      versions: sample.promptIds.map(() => -1),
      reward: 0,
      groupId: sample.groupId,
      truncated: false,
    };
    for (let turn = 0; turn < this.maxTurns; turn++) {
      if (turn > 0) {
        t.inputIds.push(...this.reflectIds);
        for (const _ of this.reflectIds) {
          t.lossMask.push(0);
          t.logprobs.push(0);
          t.versions.push(-1);
        }
      }
      const out = await engine.generate({
        inputIds: t.inputIds,
        gconfig: { ...this.init.gconfig, n: 1 },
      });
      t.inputIds.push(...out.outputTokens);
      t.lossMask.push(...out.outputTokens.map(() => 1));
      t.logprobs.push(...out.outputLogprobs);
      t.versions.push(...out.outputVersions);
      t.truncated = out.stopReason === 'length';
      if (t.truncated) {
        t.reward = this.truncatedReward;
        break;
      }
      const text = this.init.tokenizer.decode(out.outputTokens);
      if (gsm8kReward(text, sample.label ?? '') === 1) {
        t.reward = Math.pow(this.turnDiscount, turn);
        break;
      }
    }
    return t;
  }
}
