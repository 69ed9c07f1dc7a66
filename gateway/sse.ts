/**
 * Answers on the wire: whole JSON bodies, and server-sent events as OpenAI and Anthropic stream
 * them: `data: {json}` frames (with an `event:` line for the Responses and Messages APIs), ended by
 * `data: [DONE]` on chat completions.
 *
 * @module
 */
import type { ServerResponse } from 'node:http';

/** Answers `body` as JSON with `status`. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

/** Starts an event stream on `res`. */
export function startSse(res: ServerResponse): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
}

/** Writes one event; `event` names it (Responses API style). */
export function sendSse(res: ServerResponse, data: unknown, event?: string): void {
  res.write(`${event ? `event: ${event}\n` : ''}data: ${JSON.stringify(data)}\n\n`);
}

/** Ends a chat-completions stream with `[DONE]`. */
export function endSse(res: ServerResponse, done = true): void {
  if (done) res.write('data: [DONE]\n\n');
  res.end();
}
