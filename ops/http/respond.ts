/**
 * Small HTTP helpers shared by the head's server and its routes: JSON/text answers, bounded
 * request bodies, CSV.
 *
 * @module
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';

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

/**
 * Reads a request body of at most `maxBytes`. A larger one (declared or actual) is read to its
 * end and thrown away, then refused with `PACKAGE_TOO_LARGE` (413), so the client gets the 413
 * instead of a reset connection; a client that keeps sending past 4× the limit is cut off.
 * With `toFile`, the body streams to that file instead of memory.
 */
export function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer>;
export function readBody(req: IncomingMessage, maxBytes: number, toFile: string): Promise<number>;
export function readBody(
  req: IncomingMessage,
  maxBytes: number,
  toFile?: string,
): Promise<Buffer | number> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? 0);
    let over = declared > maxBytes;
    const parts: Buffer[] = [];
    const out = toFile === undefined ? undefined : openSync(toFile, 'w', 0o600);
    let size = 0;
    const tooLarge = () =>
      new OpsError(
        'PACKAGE_TOO_LARGE',
        `request body of ${over && declared > maxBytes ? declared : size} bytes is over the ${maxBytes}-byte limit`,
      );
    const done = () => {
      if (out !== undefined) closeSync(out);
    };
    req.on('data', (d: Buffer) => {
      size += d.length;
      if (size > maxBytes) over = true;
      if (over) {
        if (size > 4 * maxBytes) {
          done();
          reject(tooLarge());
          req.destroy();
        }
        return;
      }
      if (out !== undefined) writeSync(out, d);
      else parts.push(d);
    });
    req.on('end', () => {
      done();
      if (over) reject(tooLarge());
      else resolve(out !== undefined ? size : Buffer.concat(parts));
    });
    req.on('error', (e) => {
      done();
      reject(e);
    });
  });
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
