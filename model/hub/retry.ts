/**
 * Retries with exponential backoff and jitter, for the Hub's resets, 5xx and 429 answers.
 *
 * @module
 */
import { HubError } from './errors.ts';

/** How failed requests are retried. */
export interface RetryOptions {
  /** Tries after the first. @default 5 */
  retries?: number;
  /** Delay before the first retry; doubles each time. @default 500 */
  baseDelayMs?: number;
  /** Upper bound on one delay. @default 10_000 */
  maxDelayMs?: number;
}

/** {@link RetryOptions} with every default filled in. */
export type ResolvedRetry = Required<RetryOptions>;

/** The defaults of {@link RetryOptions}. */
export const retryDefaults: ResolvedRetry = { retries: 5, baseDelayMs: 500, maxDelayMs: 10_000 };

/** The delay before retry `attempt` (0-based), scaled by a factor in [0.5, 1] so clients spread. */
export function retryDelayMs(attempt: number, o: ResolvedRetry): number {
  return Math.min(o.maxDelayMs, o.baseDelayMs * 2 ** attempt) * (0.5 + Math.random() / 2);
}

/** Whether `e` is worth another try: a retryable {@link HubError}. */
export const isRetryable = (e: unknown): boolean => e instanceof HubError && e.retryable;

/** Runs `fn` until it succeeds, it fails with an error not worth a retry, or retries run out. */
export async function withRetries<T>(
  fn: (attempt: number) => Promise<T>,
  o: ResolvedRetry,
  signal?: AbortSignal,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (e) {
      if (!isRetryable(e) || attempt >= o.retries || signal?.aborted) throw e;
      await new Promise((r) => setTimeout(r, retryDelayMs(attempt, o)));
    }
  }
}
