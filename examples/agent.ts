/**
 * A multi-turn math agent with OpenRLHF's step-function API. The model answers; a right answer
 * ends the episode with reward 1, a wrong one earns "wrong, try again" as feedback (masked out of
 * the loss) and another turn, for a smaller reward. An answer cut off by the token limit ends the
 * episode with a penalty: without it, pushing wrong answers down also pushes down their end
 * token, and the policy learns to ramble.
 *
 *   npx rtjob submit -- train_ppo --agent-func ./examples/agent.ts
 */
import { gsm8kReward } from 'rtjob/rewards';

/** Turns before the episode ends unanswered. */
export const maxTurns = 2;

/** Later right answers are worth less, so answering right at once is what the policy learns. */
const turnDiscount = 0.5;

/** Reward of an answer that never finished (hit `--generate-max-len`). */
const truncatedReward = -1;

export async function step(
  _observation: string,
  action: string,
  label: string | undefined,
  ctx: {
    turn: number;
    stopReason: string;
    tokenizer: { applyChatTemplate(m: { role: string; content: string }[]): number[] };
  },
) {
  if (ctx.stopReason === 'length')
    return { reward: truncatedReward, done: true, extraInfo: { solved_turn: -1 } };
  const right = gsm8kReward(action, label ?? '') === 1;
  if (right)
    return {
      reward: Math.pow(turnDiscount, ctx.turn),
      done: true,
      extraInfo: { solved_turn: ctx.turn },
    };
  if (ctx.turn + 1 >= maxTurns) return { reward: 0, done: true, extraInfo: { solved_turn: -1 } };
  // Feedback as a user turn in the chat format, then the assistant header for the next answer.
  const feedback = ctx.tokenizer.applyChatTemplate([{ role: 'user', content: 'wrong, try again' }]);
  return { reward: 0, environmentFeedbackIds: feedback, done: false };
}
