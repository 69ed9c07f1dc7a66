/**
 * Token authentication for every HTTP and WebSocket request: `Authorization: Bearer <token>`,
 * `X-Rtjob-Token`, or the `rtjob_token` cookie that the login link sets for the dashboard.
 * Requests that ride on the cookie and change state must also come from our own origin (CSRF).
 *
 * @module
 */
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

export const tokenCookie = 'rtjob_token';

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name)
      return decodeURIComponent(part.slice(eq + 1).trim());
  }
  return undefined;
}

/** How a request proved it holds the token, or `null` when it did not. */
export function authenticate(req: IncomingMessage, token: string): 'header' | 'cookie' | null {
  const auth = req.headers.authorization;
  if (auth?.startsWith('Bearer ') && sameSecret(auth.slice(7).trim(), token)) return 'header';
  const x = req.headers['x-rtjob-token'];
  if (typeof x === 'string' && sameSecret(x, token)) return 'header';
  const c = cookieValue(req.headers.cookie, tokenCookie);
  if (c !== undefined && sameSecret(c, token)) return 'cookie';
  return null;
}

/** A cookie-authenticated, state-changing request must carry our own Origin (or none). */
export function sameOrigin(req: IncomingMessage): boolean {
  const origin = req.headers.origin;
  if (origin === undefined || origin === 'null') return origin === undefined;
  try {
    return new URL(origin).host === req.headers.host;
  } catch {
    return false;
  }
}

/** The `Set-Cookie` value the login link answers with. */
export function loginCookie(token: string): string {
  return `${tokenCookie}=${encodeURIComponent(token)}; HttpOnly; SameSite=Strict; Path=/; Max-Age=2592000`;
}

/** True for 127.0.0.0/8, ::1 and localhost. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}
