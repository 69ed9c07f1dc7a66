/**
 * The error the reward parsers throw on text they cannot read; the reward functions catch it
 * and score the answer as unreadable.
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
