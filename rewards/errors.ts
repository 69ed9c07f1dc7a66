/**
 * The errors of rewards: what the reward parsers throw on text they cannot read (the reward
 * functions catch it and score the answer as unreadable), and a remote reward service's failure.
 *
 * @module
 */
import { RtjobError } from '../runtime/errors.ts';

/** Text a reward parser cannot read (a LaTeX expression, a number in words). */
export class RewardParseError extends RtjobError<'REWARD_PARSE'> {
  override get name(): string {
    return 'RewardParseError';
  }

  constructor(message: string) {
    super('REWARD_PARSE', message);
  }
}

/**
 * A remote reward service (`--remote-rm-url`) did not score a response: no answer in time after
 * the retries, an error status, or an answer not in OpenRLHF's shape. The episode fails with it
 * and counts against `--agent-error-budget`, like an agent that threw.
 */
export class RemoteRewardError extends RtjobError<'REMOTE_REWARD'> {
  override get name(): string {
    return 'RemoteRewardError';
  }

  constructor(message: string, opts: { url: string | undefined; cause?: unknown }) {
    super('REMOTE_REWARD', message, {
      context: opts.url === undefined ? {} : { url: opts.url },
      ...(opts.cause === undefined ? {} : { cause: opts.cause }),
    });
  }
}

/**
 * An LLM judge (`rewards/judge.ts`) did not grade an episode: its endpoint failed after the
 * retries, or its reply held no grade in range. Thrown from an agent, the episode fails and counts
 * against `--agent-error-budget` rather than getting a made-up reward.
 */
export class JudgeError extends RtjobError<'JUDGE'> {
  override get name(): string {
    return 'JudgeError';
  }

  constructor(message: string, model: string, cause?: unknown) {
    super('JUDGE', message, { context: { model }, ...(cause === undefined ? {} : { cause }) });
  }
}
