/**
 * The Reward role for runs without `--agent-func`: a rule-based math reward (the answer after
 * `The answer is` or in `\boxed{}` against the gold `#### N`), wrapped as a single-turn step
 * function so every run goes through the same episode machinery.
 *
 * @module
 */
import { gsm8kReward } from '../rewards/index.ts';
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
