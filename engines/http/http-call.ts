/**
 * One JSON request to an inference server with a time limit, turning every failure into an
 * {@link EngineError} with a code that says whether a retry can help.
 *
 * Built on `node:http` rather than `fetch`: Node's `fetch` gives up on any answer whose headers
 * take more than 300 s (undici's `headersTimeout`), and a non-streaming generation of a long
 * sample on a loaded server routinely does. Here the only limit is the caller's `timeoutMs`.
 *
 * @module
 */
import http from 'node:http';
import https from 'node:https';
import { StringDecoder } from 'node:string_decoder';

import { RtjobError } from '../../runtime/errors.ts';
import { EngineError, isEngineError } from './errors.ts';

/** Options of one HTTP call. */
export interface HttpCallOptions {
  /** `POST` when a body is given, else `GET`. */
  method?: 'GET' | 'POST';
  /** Give up after this long. */
  timeoutMs: number;
  /** Cancels the call; an {@link EngineError} given as the abort reason is rethrown as is. */
  signal?: AbortSignal;
  /**
   * A 2xx answer must be JSON; anything else fails with code `protocol` (quoting the start of
   * the body) instead of being returned as text. @default false
   */
  expectJson?: boolean;
  /** Extra request headers (e.g. `authorization`). */
  headers?: Record<string, string>;
}

/**
 * Sends `body` as JSON to `url` and hands each server-sent event's `data` to `onEvent` as it
 * arrives (`text/event-stream`, as SGLang and vLLM stream generations), up to `data: [DONE]` or
 * the end of the answer. Fails like {@link httpCall}: a non-2xx answer with code `http`, a
 * connection lost part way with code `network`, the time limit (on the whole stream) with
 * `timeout`.
 *
 * @example
 * await httpStream(url + '/generate', { input_ids: [1], stream: true }, { timeoutMs: 60_000 }, (d) => console.log(d));
 */
export async function httpStream(
  url: string,
  body: unknown,
  opts: Omit<HttpCallOptions, 'expectJson' | 'method'>,
  onEvent: (data: string) => void,
): Promise<void> {
  const decoder = new StringDecoder('utf8');
  let pending = '';
  let done = false;
  const onBody = (c: Buffer): void => {
    pending += decoder.write(c);
    // Events end with a blank line; only `data:` fields matter here (SSE, WHATWG HTML §9.2).
    let end: number;
    while (!done && (end = pending.search(/\r?\n\r?\n/)) >= 0) {
      const event = pending.slice(0, end);
      pending = pending.slice(end).replace(/^\r?\n\r?\n/, '');
      const data = event
        .split(/\r?\n/)
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data === '[DONE]') done = true;
      else if (data.length > 0) onEvent(data);
    }
  };
  await httpCall(url, body, { ...opts, onBody });
}

/** Connections are kept open between requests, as a client of an inference server should. */
const agents = {
  'http:': new http.Agent({ keepAlive: true }),
  'https:': new https.Agent({ keepAlive: true }),
};

/** `setTimeout` takes at most a signed 32-bit delay; a longer one would fire at once. */
const maxTimerMs = 2 ** 31 - 1;

/**
 * Sends `body` as JSON to `url` and returns the parsed JSON answer (`null` for an empty body,
 * the raw text when the server answers with non-JSON text and `expectJson` is off).
 *
 * @example
 * const out = await httpCall('http://127.0.0.1:30000/generate', { input_ids: [1, 2] }, { timeoutMs: 60_000 });
 */
export async function httpCall(
  url: string,
  body: unknown,
  opts: HttpCallOptions & { onBody?: (chunk: Buffer) => void },
): Promise<unknown> {
  const method = opts.method ?? (body === undefined ? 'GET' : 'POST');
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  let answer: Answer;
  try {
    answer = await exchange(url, method, payload, opts);
  } catch (e) {
    // A kept-alive connection the server closed while idle fails at once, before the request
    // reached it: that request is safe to send again. On a new connection, not the next pooled
    // one: a server that restarted dropped every connection kept from before.
    if (!(e instanceof StaleConnection)) throw e;
    answer = await exchange(url, method, payload, opts, true);
  }
  const parsed = parseBody(answer.text);
  if (answer.status < 200 || answer.status >= 300) {
    const retryAfterMs = parseRetryAfter(answer.retryAfter);
    throw new EngineError(
      'HTTP_STATUS',
      `${method} ${url} answered ${answer.status}: ${errorMessage(parsed, answer.text)}` +
        (retryAfterMs === undefined ? '' : ` (retry after ${retryAfterMs} ms)`),
      { url, status: answer.status, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) },
    );
  }
  if (opts.expectJson && (parsed === null || typeof parsed === 'string')) {
    throw new EngineError(
      'PROTOCOL',
      `${method} ${url} answered ${answer.status} with a body that is not JSON: ${JSON.stringify(answer.text.slice(0, 200))}`,
      { url, status: answer.status },
    );
  }
  return parsed;
}

interface Answer {
  status: number;
  text: string;
  retryAfter: string | undefined;
}

/** The reused connection was already closed by the server; see {@link httpCall}. */
class StaleConnection extends RtjobError<'STALE_CONNECTION'> {
  override get name(): string {
    return 'StaleConnection';
  }

  constructor(message: string) {
    super('STALE_CONNECTION', message);
  }
}

function exchange(
  url: string,
  method: 'GET' | 'POST',
  payload: Buffer | undefined,
  opts: HttpCallOptions & { onBody?: (chunk: Buffer) => void },
  fresh = false,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const target = new URL(url);
    const agent = target.protocol === 'https:' ? agents['https:'] : agents['http:'];
    const transport = target.protocol === 'https:' ? https : http;
    let settled = false;
    let gotAnswer = false;
    let timer: NodeJS.Timeout | undefined;
    const settle = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      fn();
    };
    const fail = (e: EngineError | StaleConnection): void => {
      settle(() => reject(e));
      req.destroy();
    };
    const onAbort = (): void => {
      const reason: unknown = opts.signal?.reason;
      fail(
        isEngineError(reason)
          ? reason
          : new EngineError('ABORTED', `${method} ${url} was cancelled`, { url, cause: reason }),
      );
    };
    if (opts.signal?.aborted) return onAbort();

    const req = transport.request(target, {
      method,
      // `false`: a connection of its own, closed after the answer.
      agent: fresh ? false : agent,
      headers: {
        ...opts.headers,
        ...(payload
          ? { 'content-type': 'application/json', 'content-length': payload.length }
          : {}),
      },
    });
    req.on('response', (res) => {
      gotAnswer = true;
      const chunks: Buffer[] = [];
      let streamed = 0;
      // A 2xx answer goes to `onBody` as it comes; an error answer is read whole for its message.
      const ok = (res.statusCode ?? 0) >= 200 && (res.statusCode ?? 0) < 300;
      res.on('data', (c: Buffer) => {
        if (!ok || !opts.onBody) return void chunks.push(c);
        streamed += c.length;
        try {
          opts.onBody(c);
        } catch (e) {
          fail(
            isEngineError(e)
              ? e
              : new EngineError('PROTOCOL', `${method} ${url}: ${(e as Error).message}`, {
                  url,
                  cause: e,
                }),
          );
        }
      });
      res.on('end', () =>
        settle(() =>
          resolve({
            status: res.statusCode ?? 0,
            text: Buffer.concat(chunks).toString('utf8'),
            retryAfter: header(res.headers['retry-after']),
          }),
        ),
      );
      // Without 'end', the connection went away part way through the answer.
      res.on('close', () => {
        if (res.complete) return;
        const read = chunks.reduce((a, c) => a + c.length, streamed);
        fail(
          new EngineError(
            'NETWORK',
            `${method} ${url}: the connection closed after ${read} bytes of a ${res.statusCode} answer`,
            { url },
          ),
        );
      });
    });
    req.on('error', (e: NodeJS.ErrnoException) => {
      if (req.reusedSocket && !gotAnswer && (e.code === 'ECONNRESET' || e.code === 'EPIPE')) {
        return fail(new StaleConnection(e.message));
      }
      const what = gotAnswer ? 'lost the connection mid-answer' : 'failed';
      fail(
        new EngineError('NETWORK', `${method} ${url} ${what}: ${e.code ?? e.message}`, {
          url,
          cause: e,
        }),
      );
    });
    if (Number.isFinite(opts.timeoutMs)) {
      timer = setTimeout(
        () => {
          fail(
            new EngineError('TIMEOUT', `${method} ${url} got no answer in ${opts.timeoutMs} ms`, {
              url,
            }),
          );
        },
        Math.min(Math.max(0, opts.timeoutMs), maxTimerMs),
      );
    }
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    req.end(payload);
  });
}

function header(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** `Retry-After` as milliseconds from now: delay-seconds or an HTTP date (RFC 9110 §10.2.3). */
export function parseRetryAfter(v: string | undefined, nowMs = Date.now()): number | undefined {
  if (v === undefined) return undefined;
  const s = v.trim();
  if (/^\d+$/.test(s)) return Number(s) * 1000;
  const at = Date.parse(s);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
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
