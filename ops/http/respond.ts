/**
 * Small HTTP helpers shared by the head's server and its routes: JSON/text answers, bounded
 * request bodies (plain, gzip or deflate), CSV.
 *
 * @module
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable, Transform } from 'node:stream';
import { createGunzip, createInflate } from 'node:zlib';

import type { Schema } from '../../runtime/schema.ts';
import { OpsError } from '../jobs/errors.ts';

/** Largest JSON request body. */
export const maxJsonBytes = 1 << 20;

export function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, {
    'content-type': typeof body === 'string' ? 'text/plain; charset=utf-8' : 'application/json',
    'cache-control': 'no-store',
    ...headers,
  });
  res.end(text);
}

/** The `content-encoding`s a request body may come in, and the stream that inflates each. */
const decoders: Record<string, () => Transform> = {
  gzip: () => createGunzip(),
  'x-gzip': () => createGunzip(),
  deflate: () => createInflate(),
};

/**
 * Reads a request body of at most `maxBytes`, after decoding: a `gzip` or `deflate` body is
 * inflated as a stream and counted as it inflates, so a compressed bomb costs the chunks read so
 * far, not its size. A body over the limit is refused with `PACKAGE_TOO_LARGE` (413) at once —
 * before reading anything when its `content-length` says so, else the moment the count passes
 * the limit — and the rest of it is dropped, within bounds ({@link sendAndDropBody}). With `toFile`, the body streams to that file instead of memory.
 */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer>;
export function readBody(req: IncomingMessage, maxBytes: number, toFile: string): Promise<number>;
export function readBody(
  req: IncomingMessage,
  maxBytes: number,
  toFile?: string,
): Promise<Buffer | number> {
  return new Promise((resolve, reject) => {
    const tooLarge = (what: string) =>
      new OpsError(
        'PACKAGE_TOO_LARGE',
        `request body of ${what} is over the ${maxBytes}-byte limit`,
      );
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > maxBytes) return reject(tooLarge(`${declared} bytes (its content-length)`));
    const encoding = String(req.headers['content-encoding'] ?? 'identity')
      .trim()
      .toLowerCase();
    const decoder = encoding === 'identity' || encoding === '' ? undefined : decoders[encoding];
    if (decoder === undefined && encoding !== 'identity' && encoding !== '')
      return reject(
        new OpsError(
          'UNSUPPORTED_MEDIA_TYPE',
          `content-encoding ${encoding} is not supported (gzip, deflate or none)`,
        ),
      );
    const inflate = decoder?.();
    const body: Readable = inflate ? req.pipe(inflate) : req;
    const parts: Buffer[] = [];
    const out = toFile === undefined ? undefined : openSync(toFile, 'w', 0o600);
    let wire = 0;
    let size = 0;
    let settled = false;
    const finish = (err?: Error) => {
      if (settled) return;
      settled = true;
      if (out !== undefined) closeSync(out);
      if (err === undefined) return resolve(out !== undefined ? size : Buffer.concat(parts));
      parts.length = 0;
      if (inflate) {
        req.unpipe(inflate);
        inflate.destroy();
      }
      req.pause();
      reject(err);
    };
    if (inflate)
      req.on('data', (d: Buffer) => {
        wire += d.length;
        if (wire > maxBytes) finish(tooLarge(`more than ${maxBytes} bytes (compressed)`));
      });
    body.on('data', (d: Buffer) => {
      if (settled) return;
      size += d.length;
      if (size > maxBytes)
        return finish(tooLarge(inflate ? `${size}+ bytes inflated` : `${size}+ bytes`));
      if (out !== undefined) writeSync(out, d);
      else parts.push(d);
    });
    body.on('end', () => finish());
    body.on('error', (e) =>
      finish(
        inflate
          ? new OpsError('BAD_REQUEST', `request body is not valid ${encoding}: ${e.message}`)
          : e,
      ),
    );
    if (inflate) req.on('error', (e) => finish(e));
  });
}

/** Whether `req`'s body was left unread (refused part way, or never read). */
export function bodyUnread(req: IncomingMessage): boolean {
  return !req.complete;
}

/** How much of a refused body is read and dropped after the answer, and for how long. */
export const lingerLimits = { bytes: 8 * 1024 * 1024, ms: 5000 };

/**
 * Answers a request whose body was refused part way (`connection: close`), then closes the
 * connection the way a lingering close does: our side ends once the answer is out, and what the
 * client is still sending is read and dropped — at most {@link lingerLimits} — before the socket
 * goes, so that the client reads the answer rather than a reset. Nothing of the body is kept.
 */
export function sendAndDropBody(
  req: IncomingMessage,
  res: ServerResponse,
  status: number,
  body: unknown,
): void {
  const socket = req.socket;
  // Node ends a `connection: close` answer with destroySoon(): the socket is destroyed as soon as
  // the answer is written, and the unread bytes behind it make the kernel reset the connection.
  socket.destroySoon = () => {
    let dropped = 0;
    const cut = () => {
      clearTimeout(timer);
      socket.destroy();
    };
    const timer = setTimeout(cut, lingerLimits.ms);
    req.on('data', (d: Buffer) => {
      dropped += d.length;
      if (dropped > lingerLimits.bytes) cut();
    });
    socket.once('end', cut);
    socket.end();
    req.resume();
  };
  send(res, status, body, { connection: 'close' });
}

/** Reads a JSON body and checks it against `schema` (400 naming the first bad field). */
export async function readJson<T>(
  req: IncomingMessage,
  schema: Schema<T>,
  maxBytes = maxJsonBytes,
): Promise<T> {
  const v = await readJsonObject(req, maxBytes);
  const bad = schema.check(v, 'body');
  if (bad !== undefined) throw new OpsError('BAD_REQUEST', `invalid request: ${bad}`);
  return v as T;
}

async function readJsonObject(
  req: IncomingMessage,
  maxBytes: number,
): Promise<Record<string, unknown>> {
  const body = await readBody(req, maxBytes);
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8') || '{}');
  } catch {
    throw new OpsError('BAD_REQUEST', 'request body is not valid JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new OpsError('BAD_REQUEST', 'request body must be a JSON object');
  return v as Record<string, unknown>;
}

export function toCsv(columns: string[], rows: (number | null)[][]): string {
  const lines = [columns.join(',')];
  for (const r of rows) lines.push(r.map((v) => (v === null ? '' : String(v))).join(','));
  return lines.join('\n') + '\n';
}
