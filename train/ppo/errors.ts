/**
 * Errors of a `train_ppo` run that a user acts on: a role's process died, a weight sync did not
 * finish. Checked by `code`.
 *
 * @module
 */
import { RtjobError } from '../../runtime/errors.ts';

/** Which role a placed actor plays. */
export type RoleName = 'rollout' | 'trainer' | 'reference' | 'teacher' | 'reward' | 'critic';

/**
 * A role's actor died while the run needed it. Rollouts are restarted by the driver and never
 * surface this; the trainer, reference and critic hold state the run cannot rebuild, so the run
 * fails with this error and `hint` tells how to resume.
 */
export class RoleDiedError extends RtjobError<'TRAIN_PPO_ROLE_DIED'> {
  override get name(): string {
    return 'RoleDiedError';
  }

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

/** The step of a weight sync that failed: the trainer's snapshot, the push to a rollout, or a step inside its engine. */
export type WeightSyncPhase =
  | 'fetch'
  | 'push'
  | 'pause'
  | 'reload'
  | 'continue'
  | 'catch-up reload';

/**
 * A weight sync did not finish: the trainer did not hand out its weights, a rollout did not
 * answer the push within `--weight-sync-timeout-ms` (plus a health probe's time), or its engine
 * failed a step (`phase`) on every server. Names the rollout, its engine and the phase.
 */
export class WeightSyncError extends RtjobError<'TRAIN_PPO_WEIGHT_SYNC'> {
  override get name(): string {
    return 'WeightSyncError';
  }

  constructor(
    readonly version: number,
    /** The rollout's index; -1 for the trainer (phase `fetch`). */
    readonly rollout: number,
    /** What the weights went to, e.g. `builtin` or `sglang http://gpu1:30000`. */
    readonly engine: string,
    readonly phase: WeightSyncPhase,
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(
      'TRAIN_PPO_WEIGHT_SYNC',
      `weight sync of version ${version} ${rollout < 0 ? 'from the trainer' : `to rollout ${rollout} (${engine})`} failed in phase '${phase}': ${detail}`,
      options,
    );
  }
}

/** Stable codes of {@link TrainPpoError}. */
export type TrainPpoErrorCode =
  /** The checkpoint to resume from lacks the driver's state, or was written for other flags. */
  | 'TRAIN_PPO_CHECKPOINT'
  /** The async loop could not go on: its buffer closed early, or staleness broke its bound. */
  | 'TRAIN_PPO_ASYNC'
  /** A dead rollout was not restarted in time. */
  | 'TRAIN_PPO_ROLLOUT_RESTART';

/** A `train_ppo` run cannot go on for a reason other than a dead role or a weight sync. */
export class TrainPpoError extends RtjobError<TrainPpoErrorCode> {
  override get name(): string {
    return 'TrainPpoError';
  }
}
