/**
 * Small helpers the server protocols share.
 *
 * @module
 */
import { EngineError, isEngineError } from './errors.ts';
import type { TopLogprobs } from '../types.ts';
import type {
  ResolvedGenerationConfig,
  SampleTokens,
  ServerCall,
  StreamedTokens,
} from './remote-engine.ts';

/** Calls a route, returning `false` instead of failing when the server does not have it (404). */
export async function callOptional(
  call: ServerCall,
  path: string,
  body?: unknown,
): Promise<boolean> {
  try {
    await call(path, body, { method: 'POST' });
    return true;
  } catch (e) {
    if (isEngineError(e) && e.code === 'HTTP_STATUS' && (e.status === 404 || e.status === 405))
      return false;
    throw e;
  }
}

/** Throws `EngineError('PROTOCOL')` unless `cond` holds. */
export function expectShape(cond: unknown, url: string, what: string): asserts cond {
  if (!cond) throw new EngineError('PROTOCOL', `unexpected answer from ${url}: ${what}`, { url });
}

/**
 * The temperature check both servers need: when a server reports logprobs from before
 * temperature scaling, they are not the logprobs of the distribution tokens were sampled from
 * unless the temperature is 1 (or sampling is greedy), and one logprob cannot be converted
 * without the whole distribution, so the request is refused with the fix in the message.
 */
export function requireTemperedOrUnitTemperature(
  raw: boolean,
  temperature: number,
  greedy: boolean,
  fix: string,
): void {
  if (raw && !greedy && temperature !== 1 && temperature !== 0) {
    throw new EngineError(
      'CONFIG',
      `the server reports logprobs before temperature scaling, so temperature ${temperature} would give ` +
        `behaviour logprobs of the wrong distribution; ${fix}`,
    );
  }
}

/**
 * The sampling fields SGLang's `sampling_params` and vLLM's completion body name alike:
 * temperature (0 when greedy), `top_p`, `top_k` (−1 when off), stop token ids, and `ignore_eos`
 * off. Token budgets, stop strings and the seed are named differently and added by each protocol.
 */
export function sharedSamplingFields(g: ResolvedGenerationConfig): Record<string, unknown> {
  return {
    temperature: g.greedy ? 0 : g.temperature,
    top_p: g.topP,
    top_k: g.topK > 0 ? g.topK : -1,
    stop_token_ids: g.stopTokenIds,
    ignore_eos: false,
  };
}

/**
 * `[token id, logprob]` pairs as the `k` most likely, most likely first (the order the contract
 * promises; vLLM puts the sampled token first and may add it as a `k + 1`-th entry).
 */
export function mostLikelyFirst(
  pairs: ReadonlyArray<readonly [number, number]>,
  k = pairs.length,
): TopLogprobs {
  const kept = [...pairs].sort((a, b) => b[1] - a[1]).slice(0, k);
  return { ids: kept.map((p) => p[0]), logprobs: kept.map((p) => p[1]) };
}

/**
 * What a stream reader has of each of `n` samples so far: tokens, logprobs, alternatives when
 * `top` > 0, and how the sample ended (`F`: the protocol's own form of it) once it did.
 */
export function streamedSamples<F>(n: number, top: number) {
  const outs = Array.from({ length: n }, () => ({
    tokens: [] as number[],
    logprobs: [] as number[],
    ...(top > 0 ? { top: [] as TopLogprobs[] } : {}),
    finish: undefined as F | undefined,
  }));
  return {
    /** How many tokens sample `i` has so far. */
    length: (i: number): number => outs[i]!.tokens.length,
    /** Appends new tokens to sample `i` (and its end, once known); returns them as an event. */
    add(i: number, fresh: SampleTokens, finish?: F): StreamedTokens[] {
      const o = outs[i]!;
      o.tokens.push(...fresh.tokens);
      o.logprobs.push(...fresh.logprobs);
      o.top?.push(...(fresh.top ?? []));
      if (finish !== undefined) o.finish = finish;
      return fresh.tokens.length > 0 ? [{ sample: i, ...fresh }] : [];
    },
    /** Every sample with its end; `EngineError('PROTOCOL')` when the stream ended before one. */
    end(url: string, what: string): (SampleTokens & { finish: F })[] {
      return outs.map(({ finish, ...sofar }) => {
        expectShape(finish !== undefined, url, what);
        return { ...sofar, finish };
      });
    },
  };
}
