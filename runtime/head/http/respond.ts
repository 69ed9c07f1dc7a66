/**
 * Small HTTP helpers shared by the head's server and its routes: JSON/text answers, bounded
 * request bodies, CSV.
 *
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

import { OpsError } from '../jobs/errors.ts';

/** Largest JSON request body. */
export const maxJsonBytes = 1 << 20;

export function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, {
    'content-type': typeof body === 'string' ? 'text/plain; charset=utf-8' : 'application/json',
    'cache-control': 'no-store',
    ...headers,
  });
  res.end(text);
}

export function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > maxBytes) {
      reject(new OpsError('PACKAGE_TOO_LARGE', `request body of ${declared} bytes is over the ${maxBytes}-byte limit`));
      req.resume();
      return;
    }
    const parts: Buffer[] = [];
    let size = 0;
    req.on('data', (d: Buffer) => {
      size += d.length;
      if (size > maxBytes) {
        reject(new OpsError('PACKAGE_TOO_LARGE', `request body is over the ${maxBytes}-byte limit`));
        req.destroy();
        return;
      }
      parts.push(d);
    });
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}

export async function readJson(req: IncomingMessage, maxBytes = maxJsonBytes): Promise<Record<string, unknown>> {
  const body = await readBody(req, maxBytes);
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8') || '{}');
  } catch {
    throw new OpsError('BAD_REQUEST', 'request body is not valid JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new OpsError('BAD_REQUEST', 'request body must be a JSON object');
  return v as Record<string, unknown>;
}

export function toCsv(columns: string[], rows: (number | null)[][]): string {
  const lines = [columns.join(',')];
  for (const r of rows) lines.push(r.map((v) => (v === null ? '' : String(v))).join(','));
  return lines.join('\n') + '\n';
}

