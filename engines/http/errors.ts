/**
 * Errors raised by the HTTP engines (SGLang, vLLM). Checked by `code`, never by `instanceof`
 * across a process boundary.
 *
 * @module
 */
import { RtjobError, TaskError } from '../../runtime/errors.ts';

/** Why an engine call failed. */
export type EngineErrorCode =
  /** The server answered with a non-2xx status. */
  | 'HTTP_STATUS'
  /** No answer within the request's time limit. */
  | 'TIMEOUT'
  /** Connection refused, reset or closed before an answer. */
  | 'NETWORK'
  /** The server was marked down by health checks while the request was in flight. */
  | 'SERVER_DOWN'
  /** No server is up to take the request. */
  | 'NO_SERVER'
  /** The request was cancelled on purpose (pause without a server-side abort route). */
  | 'ABORTED'
  /** The engine was closed. */
  | 'CLOSED'
  /** The server's answer does not have the documented shape. */
  | 'PROTOCOL'
  /** The request or the engine's configuration cannot be served correctly. */
  | 'CONFIG'
  /** The operation is not available on this engine. */
  | 'UNSUPPORTED';

/** An error from an HTTP engine, with the server it concerns and the HTTP status if any. */
export class EngineError extends RtjobError<EngineErrorCode> {
  override get name(): string {
    return 'EngineError';
  }

  readonly url: string | undefined;
  readonly status: number | undefined;
  /** How long the server asked to be left alone (`Retry-After` on a 429 or 503). */
  readonly retryAfterMs: number | undefined;
  /** The step of a weight update that failed (`pause`, `reload`, `continue`, ...), if one did. */
  readonly phase: string | undefined;

  constructor(
    code: EngineErrorCode,
    message: string,
    opts: {
      url?: string;
      status?: number;
      retryAfterMs?: number;
      phase?: string;
      cause?: unknown;
    } = {},
  ) {
    super(code, message, { cause: opts.cause });
    this.url = opts.url;
    this.status = opts.status;
    this.retryAfterMs = opts.retryAfterMs;
    this.phase = opts.phase;
  }

  /** Whether sending the same request again (possibly to another server) may succeed. */
  get retryable(): boolean {
    switch (this.code) {
      case 'TIMEOUT':
      case 'NETWORK':
      case 'SERVER_DOWN':
      case 'NO_SERVER':
        return true;
      case 'HTTP_STATUS':
        return this.status === undefined || this.status >= 500 || this.status === 429;
      default:
        return false;
    }
  }
}

/**
 * Whether `e` is an {@link EngineError}, checked by name and code so it works across module
 * copies and for one that came over the wire (a `TaskError` whose `remoteName` is `EngineError`;
 * its `url` and `status` fields come with it, `retryable` does not).
 */
export function isEngineError(e: unknown): e is EngineError {
  if (!(e instanceof Error) || typeof (e as { code?: unknown }).code !== 'string') return false;
  return e.name === 'EngineError' || (e instanceof TaskError && e.remoteName === 'EngineError');
}
