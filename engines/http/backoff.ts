/**
 * Exponential backoff with jitter for retried requests.
 *
 * @module
 */

/** How retries space out. */
export interface BackoffOptions {
  /** Delay before the first retry. */
  baseDelayMs: number;
  /** Upper bound on any one delay. */
  maxDelayMs: number;
}

/**
 * The delay before retry number `attempt` (0-based): `base * 2^attempt`, capped, then scaled by a
 * random factor in [0.5, 1] so that clients that failed together do not retry together.
 */
export function backoffDelayMs(attempt: number, opts: BackoffOptions): number {
  const exp = Math.min(opts.maxDelayMs, opts.baseDelayMs * 2 ** attempt);
  return exp * (0.5 + Math.random() / 2);
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
