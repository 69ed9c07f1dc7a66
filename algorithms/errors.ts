/**
 * Errors raised by the algorithms library. Each has a stable `name` and a `code` so callers on
 * the other side of a process boundary can tell them apart without `instanceof`.
 *
 * @module
 */
import { RtjobError } from '../runtime/errors.ts';

/** Why an algorithms function refused its input. */
export type AlgorithmErrorCode =
  /** An option is out of range or inconsistent with another option; `flag` names it. */
  | 'INVALID_OPTION'
  /** An input array holds NaN or ±Infinity; `field` names it. */
  | 'NON_FINITE_INPUT'
  /** Arrays that must line up do not (lengths, group sizes); `field` names the first. */
  | 'SHAPE_MISMATCH'
  /** The trajectory buffer was closed while a call waited on it. */
  | 'BUFFER_CLOSED';

/** Readonly context attached to an {@link AlgorithmError}. */
export interface AlgorithmErrorContext {
  readonly [key: string]: unknown;
  /** CLI flag the option maps to, e.g. `--advantage-estimator`. */
  readonly flag?: string;
  /** Input field, e.g. `advantages` or `trajectories[3].logprobs`. */
  readonly field?: string;
  /** Index of the first offending element, when there is one. */
  readonly index?: number;
}

/**
 * The one error class of `algorithms/`. Check `code`, not the class.
 *
 * @example
 * try { resolveAdvantageOptions({ estimator: 'rloo', nSamplesPerPrompt: 1 }); }
 * catch (e) { if ((e as AlgorithmError).code === 'INVALID_OPTION') console.error(e.message); }
 */
export class AlgorithmError extends RtjobError<AlgorithmErrorCode> {
  override get name(): string {
    return 'AlgorithmError';
  }

  declare readonly context: AlgorithmErrorContext;

  constructor(
    code: AlgorithmErrorCode,
    message: string,
    context: AlgorithmErrorContext = {},
    cause?: unknown,
  ) {
    super(code, message, { context, cause });
  }
}

/** An `INVALID_OPTION` error whose message starts with the flag, so a CLI user sees what to fix. */
export function invalidOption(flag: string, message: string): AlgorithmError {
  return new AlgorithmError('INVALID_OPTION', `${flag}: ${message}`, { flag });
}
