/**
 * Errors of the model: missing or inconsistent checkpoint files, inputs the model cannot take, a
 * backend that would not start. Checked by `code`.
 *
 * @module
 */
import { RtjobError } from '../runtime/errors.ts';

/** Stable codes of model errors. */
export type ModelErrorCode =
  /** A file the model needs (config.json, tokenizer.json, the weights) is not there. */
  | 'MODEL_FILE_MISSING'
  /** The checkpoint's files disagree with each other or with the model's config. */
  | 'MODEL_CHECKPOINT'
  /** An input or option the model cannot take. */
  | 'MODEL_INPUT'
  /** The model was used after it was disposed. */
  | 'MODEL_DISPOSED'
  /** The TF.js backend asked for is unknown, missing or failed to start. */
  | 'MODEL_BACKEND';

/** An error of the model layer. */
export class ModelError extends RtjobError<ModelErrorCode> {
  override get name(): string {
    return 'ModelError';
  }
}
