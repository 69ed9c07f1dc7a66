/**
 * Errors of the agent gateway, in OpenAI's wire shape: `{ error: { message, type, param, code } }`
 * with the HTTP status the official API uses, so the `openai` client, the AI SDK and the Agents
 * SDK raise their usual typed errors (`BadRequestError`, `AuthenticationError`, ...); on
 * `/v1/messages` in Anthropic's (`{ type: 'error', error: { type, message } }`), which
 * `@anthropic-ai/sdk` raises the same way.
 *
 * @module
 */
import { RtjobError } from '../runtime/errors.ts';

/** Stable codes of gateway errors (OpenAI's where it has one). */
export type GatewayErrorCode =
  | 'invalid_request'
  | 'invalid_json'
  | 'context_length_exceeded'
  | 'model_not_found'
  | 'invalid_api_key'
  | 'not_found'
  | 'method_not_allowed'
  | 'request_too_large'
  | 'unsupported_media_type'
  | 'session_closed'
  | 'engine_error';

/** OpenAI's error `type` for each status class. */
type OpenAiErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'not_found_error'
  | 'server_error';

/** An error answered as `status` with OpenAI's error body; `param` names the offending field. */
export class GatewayError extends RtjobError<GatewayErrorCode> {
  override get name(): string {
    return 'GatewayError';
  }

  constructor(
    readonly status: number,
    code: GatewayErrorCode,
    message: string,
    readonly param: string | null = null,
  ) {
    super(code, message);
  }

  /** OpenAI's `type` for this status. */
  get type(): OpenAiErrorType {
    if (this.status === 401) return 'authentication_error';
    if (this.status === 404) return 'not_found_error';
    if (this.status >= 500) return 'server_error';
    return 'invalid_request_error';
  }

  /** Anthropic's error `type` for this status. */
  get anthropicType(): string {
    if (this.status === 401) return 'authentication_error';
    if (this.status === 404) return 'not_found_error';
    if (this.status === 413) return 'request_too_large';
    if (this.status >= 500) return 'api_error';
    return 'invalid_request_error';
  }

  /** The JSON body the Anthropic Messages API answers with (`param` is named in the message). */
  toAnthropicBody(): { type: 'error'; error: { type: string; message: string } } {
    return { type: 'error', error: { type: this.anthropicType, message: this.message } };
  }

  /** The JSON body OpenAI answers with. */
  toBody(): { error: { message: string; type: string; param: string | null; code: string } } {
    return {
      error: { message: this.message, type: this.type, param: this.param, code: this.code },
    };
  }
}

/** A malformed or missing field: 400 naming it. */
export function badField(param: string, problem: string): GatewayError {
  return new GatewayError(400, 'invalid_request', `${param}: ${problem}`, param);
}
