/**
 * Errors of a `train_ppo` run that a user acts on: a role's process died. Checked by `code`.
 *
 * @module
 */
import { RtjobError } from '../../runtime/errors.ts';

/** Which role a placed actor plays. */
export type RoleName = 'rollout' | 'trainer' | 'reference' | 'critic';

/**
 * A role's actor died while the run needed it. Rollouts are restarted by the driver and never
 * surface this; the trainer, reference and critic hold state the run cannot rebuild, so the run
 * fails with this error and `hint` tells how to resume.
 */
export class RoleDiedError extends RtjobError<'TRAIN_PPO_ROLE_DIED'> {
  constructor(
    readonly role: RoleName,
    readonly detail: string,
    hint = '',
    options?: { cause?: unknown },
  ) {
    super('TRAIN_PPO_ROLE_DIED', `the ${role} died: ${detail}${hint ? `; ${hint}` : ''}`, options);
  }

  /** The same death, with advice on how to resume appended. */
  withHint(hint: string): RoleDiedError {
    return new RoleDiedError(this.role, this.detail, hint, { cause: this.cause });
  }
}

/** True for a {@link RoleDiedError}, also across module copies. */
export function isRoleDied(e: unknown): e is RoleDiedError {
  return (
    typeof e === 'object' && e !== null && (e as { code?: unknown }).code === 'TRAIN_PPO_ROLE_DIED'
  );
}
