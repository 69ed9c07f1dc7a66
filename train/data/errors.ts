/**
 * The one error of the dataset reader: a path, split, config, column or record it cannot use,
 * with a message of one line that names what exists instead.
 *
 * @module
 */
import { RtjobError } from '../../runtime/errors.ts';

/** What went wrong reading a dataset. */
export type DatasetErrorCode =
  /** No file or directory at the path, or a directory with no data files. */
  | 'DATASET_NOT_FOUND'
  /** The split asked for is not among the directory's splits. */
  | 'DATASET_SPLIT'
  /** A directory of several configs with none chosen, or one that is not there. */
  | 'DATASET_CONFIG'
  /** A column asked for is not in the data. */
  | 'DATASET_COLUMN'
  /** A file that does not parse as its format (bad JSON line, broken parquet). */
  | 'DATASET_FORMAT';

/** A dataset that cannot be read as asked; `path` is the file or directory. */
export class DatasetError extends RtjobError<DatasetErrorCode> {
  override get name(): string {
    return 'DatasetError';
  }

  constructor(
    code: DatasetErrorCode,
    readonly path: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(code, message, { context: { path }, ...options });
  }
}
