/**
 * The Reward role for runs without `--agent-func`: a rule-based math reward (the answer after
 * `The answer is` or in `\boxed{}` against the gold `#### N`), or with `--remote-rm-url` a
 * remote reward service, wrapped as a single-turn step function so every run goes through the
 * same episode machinery (a service that fails fails the episode, as an agent that threw).
 *
 * @module
 */
import { gsm8kReward } from '../rewards/index.ts';
import type { RemoteRewardClient } from '../rewards/remote.ts';
import type { Agent, StepFunction } from '../agents/types.ts';

/** Scores a completion against a gold solution ending `#### N` (or a bare number): 1 or 0. */
export function mathReward(completion: string, label: string | undefined): number {
  if (label === undefined) return 0;
  return gsm8kReward(completion, label);
}

/** The single-turn step function used when no agent file is given. */
export const mathStep: StepFunction = (_observation, action, label) => ({
  reward: mathReward(action, label),
  done: true,
});

/** The default agent: one answer per episode, scored by {@link mathReward}. */
export const defaultAgent: Agent = {
  kind: 'step',
  file: '<built-in math reward>',
  step: mathStep,
  maxTurns: 1,
};

/**
 * One answer per episode, scored by a remote reward service (`--remote-rm-url`): the query is the
 * prompt as the model saw it and the answer, special tokens kept, as OpenRLHF sends it; the
 * service's `extra_logs` become the episode's logged scalars.
 */
export function remoteRewardAgent(client: RemoteRewardClient, urls: string[]): Agent {
  return {
    kind: 'step',
    file: `<remote reward ${urls.join(',')}>`,
    maxTurns: 1,
    step: async (_observation, _action, label, ctx) => {
      const keep = { skipSpecialTokens: false };
      const prompt = ctx.tokenizer.decode(ctx.sample.promptIds, keep);
      const query = ctx.tokenizer.decode([...ctx.sample.promptIds, ...ctx.actionIds], keep);
      const r = await client.score({ query, prompt, label });
      return {
        reward: r.reward,
        done: true,
        ...(Object.keys(r.extraLogs).length ? { extraInfo: r.extraLogs } : {}),
      };
    },
  };
}
