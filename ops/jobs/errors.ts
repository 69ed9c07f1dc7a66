/**
 * Errors of the job API. Each has a stable `code` and the HTTP status the API answers with, so
 * the CLI can print the message and pick an exit code without parsing text.
 *
 * @module
 */
import { RtjobError } from '../../runtime/errors.ts';

/** Stable codes of the job API's errors. */
export type JobErrorCode =
  | 'BAD_REQUEST'
  | 'JOB_ID_TAKEN'
  | 'UNKNOWN_JOB'
  | 'UNKNOWN_ACTOR'
  | 'UNKNOWN_PLACEMENT_GROUP'
  | 'ENTRYPOINT_NOT_FOUND'
  | 'PACKAGE_NOT_FOUND'
  | 'UNKNOWN_PACKAGE'
  | 'NOT_FOUND'
  | 'PACKAGE_TOO_LARGE'
  | 'JOB_NOT_TERMINAL'
  | 'UNSUPPORTED'
  | 'INFEASIBLE'
  | 'BUSY'
  | 'READ_ONLY'
  | 'UNSUPPORTED_MEDIA_TYPE';

const httpStatus: Record<JobErrorCode, number> = {
  BAD_REQUEST: 400,
  JOB_ID_TAKEN: 409,
  UNKNOWN_JOB: 404,
  UNKNOWN_ACTOR: 404,
  UNKNOWN_PLACEMENT_GROUP: 404,
  ENTRYPOINT_NOT_FOUND: 400,
  PACKAGE_NOT_FOUND: 400,
  UNKNOWN_PACKAGE: 404,
  NOT_FOUND: 404,
  PACKAGE_TOO_LARGE: 413,
  JOB_NOT_TERMINAL: 409,
  UNSUPPORTED: 501,
  INFEASIBLE: 400,
  BUSY: 429,
  READ_ONLY: 405,
  UNSUPPORTED_MEDIA_TYPE: 415,
};

/** A request the operations API refuses; `status` is the HTTP status it maps to. */
export class OpsError extends RtjobError<JobErrorCode> {
  override get name(): string {
    return 'OpsError';
  }

  readonly status: number;
  constructor(code: JobErrorCode, message: string) {
    super(code, message);
    this.status = httpStatus[code];
  }
}
