/**
 * Server-sent events as OpenAI streams them: `data: {json}` frames (with an `event:` line for the
 * Responses API), ended by `data: [DONE]` on chat completions.
 *
 * @module
 */
import type { ServerResponse } from 'node:http';

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
