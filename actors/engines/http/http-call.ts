/**
 * One JSON request to an inference server with a time limit, turning every failure into an
 * {@link EngineError} with a code that says whether a retry can help.
 *
 * @module
 */
import { EngineError, isEngineError } from './errors.ts';

/** Options of one HTTP call. */
export interface HttpCallOptions {
  /** `POST` when a body is given, else `GET`. */
  method?: 'GET' | 'POST';
  /** Give up after this long. */
  timeoutMs: number;
  /** Cancels the call; an {@link EngineError} given as the abort reason is rethrown as is. */
  signal?: AbortSignal;
}

/**
 * Sends `body` as JSON to `url` and returns the parsed JSON answer (`null` for an empty body,
 * the raw text when the server answers with non-JSON text).
 *
 * @example
 * const out = await httpCall('http://127.0.0.1:30000/generate', { input_ids: [1, 2] }, { timeoutMs: 60_000 });
 */
export async function httpCall(
  url: string,
  body: unknown,
  opts: HttpCallOptions,
): Promise<unknown> {
  const method = opts.method ?? (body === undefined ? 'GET' : 'POST');
  const timeout = AbortSignal.timeout(opts.timeoutMs);
  const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
  let res: Response;
  let text: string;
  try {
    res = await fetch(url, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
    text = await res.text();
  } catch (e) {
    if (opts.signal?.aborted) {
      const reason: unknown = opts.signal.reason;
      if (isEngineError(reason)) throw reason;
      throw new EngineError('aborted', `${method} ${url} was cancelled`, { url, cause: reason });
    }
    if (timeout.aborted) {
      throw new EngineError('timeout', `${method} ${url} got no answer in ${opts.timeoutMs} ms`, {
        url,
      });
    }
    const cause = (e as { cause?: { code?: string } }).cause;
    throw new EngineError(
      'network',
      `${method} ${url} failed: ${cause?.code ?? (e as Error).message}`,
      { url, cause: e },
    );
  }
  const parsed = parseBody(text);
  if (!res.ok) {
    throw new EngineError(
      'http',
      `${method} ${url} answered ${res.status}: ${errorMessage(parsed, text)}`,
      { url, status: res.status },
    );
  }
  return parsed;
}

function parseBody(text: string): unknown {
  if (text.length === 0) return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/** Pulls the message out of the error bodies FastAPI, SGLang and vLLM send. */
function errorMessage(parsed: unknown, text: string): string {
  if (typeof parsed === 'object' && parsed !== null) {
    const p = parsed as { message?: unknown; detail?: unknown; error?: { message?: unknown } };
    if (typeof p.message === 'string') return p.message;
    if (typeof p.error?.message === 'string') return p.error.message;
    if (typeof p.detail === 'string') return p.detail;
  }
  return text.slice(0, 500);
}
