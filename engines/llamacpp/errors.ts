/**
 * Errors of the llama.cpp engine.
 *
 * @module
 */
import { RtjobError } from '../../runtime/errors.ts';

/** Why the llama.cpp engine failed. */
export type LlamaCppErrorCode =
  /** `node-llama-cpp` (an optional dependency) is not installed or its binary does not load. */
  | 'LLAMACPP_UNAVAILABLE'
  /** A GPU was asked for and no GPU build of node-llama-cpp runs a layer on a GPU here. */
  | 'LLAMACPP_NO_GPU'
  /** A request or option the engine cannot serve. */
  | 'LLAMACPP_INVALID'
  /** A weight update written in place did not reach what llama.cpp computes with. */
  | 'LLAMACPP_STALE'
  /** The engine was closed. */
  | 'LLAMACPP_CLOSED';

/** An error of the llama.cpp engine. */
export class LlamaCppError extends RtjobError<LlamaCppErrorCode> {
  override get name(): string {
    return 'LlamaCppError';
  }
}
