/**
 * What the two in-process engines (builtin, llama.cpp) share about a request: the checks a
 * request must pass, one sample per `gconfig.n` with seed + i, the state a sample carries while it
 * decodes, when it stops, what its listener is told and what it resolves to. The engines differ
 * only in how they get the next token's distribution.
 *
 * @module
 */
import { seededRandom, type SamplingParams } from '../model/sampling.ts';
import type { ChatTokenizer } from '../model/tokenizer.ts';
import type { GenerateRequest, GenerateResult, StopReason, TopLogprobs } from './types.ts';

/** One sample of a request, from submission until it resolves. */
export interface LocalSample {
  /** Sample index told to `onTokens`. */
  sample: number;
  onTokens: GenerateRequest['onTokens'];
  prompt: number[];
  tokens: number[];
  logprobs: number[];
  versions: number[];
  /** Alternatives asked for per token (0: none) and those found. */
  topN: number;
  tops: TopLogprobs[];
  sampling: SamplingParams;
  maxNew: number;
  minNew: number;
  stopIds: Set<number>;
  stop: string[];
  rand: () => number;
  startMs: number;
  resolve: (r: GenerateResult) => void;
  reject: (e: Error) => void;
}

/** What an engine can serve, for {@link newLocalSample}. */
export interface LocalLimits {
  vocabSize: number;
  /** Prompt plus output tokens one sequence may hold. */
  maxTokens: number;
  maxTopLogprobs: number;
  /** Needed for stop strings. */
  tokenizer: ChatTokenizer | undefined;
  /** Tokens that always end generation. */
  eos: readonly number[];
  /** The engine's stream, for samples without a seed. */
  rand: () => number;
}

/** Starts one sample of a request with its seed and its index among the request's samples. */
export type SubmitSample = (
  req: GenerateRequest,
  seed: number | undefined,
  sample: number,
) => Promise<GenerateResult>;

/**
 * `generate` of an in-process engine: one sample, `gconfig.n` must be 1.
 *
 * @param submit starts one sample with its seed and index
 * @param invalid the engine's error for a request it cannot serve
 */
export function generateOne(
  req: GenerateRequest,
  submit: SubmitSample,
  invalid: (message: string) => Error,
): Promise<GenerateResult> {
  if ((req.gconfig?.n ?? 1) !== 1)
    return Promise.reject(invalid('generate: gconfig.n must be 1; use generateN'));
  return submit(req, req.gconfig?.seed, 0);
}

/** `generateN`: `gconfig.n` samples decoded together, sample i seeded with `seed + i`. */
export function generateEach(
  req: GenerateRequest,
  submit: SubmitSample,
): Promise<GenerateResult[]> {
  const n = req.gconfig?.n ?? 1;
  const seed = req.gconfig?.seed;
  return Promise.all(
    Array.from({ length: n }, (_, i) => submit(req, seed === undefined ? undefined : seed + i, i)),
  );
}

/**
 * Checks `req` against `limits` and returns the sample that will decode it, or the reason it
 * cannot be served (a one-line message for the engine's own error).
 */
export function newLocalSample(
  req: GenerateRequest,
  seed: number | undefined,
  sample: number,
  limits: LocalLimits,
  settle: Pick<LocalSample, 'resolve' | 'reject'>,
): LocalSample | string {
  const g = req.gconfig ?? {};
  if (!req.inputIds.length) return 'generate: inputIds is empty';
  if (req.inputIds.length >= limits.maxTokens)
    return `generate: prompt of ${req.inputIds.length} tokens leaves no room (max ${limits.maxTokens})`;
  const V = limits.vocabSize;
  if (req.inputIds.some((t) => !Number.isInteger(t) || t < 0 || t >= V))
    return `generate: inputIds must be integers in [0, ${V})`;
  if (g.stop?.length && !limits.tokenizer) return 'generate: stop strings need a tokenizer';
  const topN = g.topLogprobs ?? 0;
  if (!Number.isInteger(topN) || topN < 0 || topN > limits.maxTopLogprobs)
    return `generate: topLogprobs must be an integer in [0, ${limits.maxTopLogprobs}]`;
  return {
    sample,
    onTokens: req.onTokens,
    prompt: [...req.inputIds],
    tokens: [],
    logprobs: [],
    versions: [],
    topN,
    tops: [],
    sampling: {
      temperature: g.temperature ?? 1,
      topK: g.topK ?? 0,
      topP: g.topP ?? 1,
      greedy: g.greedy ?? false,
    },
    maxNew: Math.min(g.maxNewTokens ?? 256, limits.maxTokens - req.inputIds.length),
    minNew: g.minNewTokens ?? 0,
    stopIds: new Set([...limits.eos, ...(g.stopTokenIds ?? [])]),
    stop: g.stop ?? [],
    rand: seed === undefined ? limits.rand : seededRandom(seed),
    startMs: performance.now(),
    ...settle,
  };
}

/**
 * Appends a generated token (with its alternatives when asked) at `version`, tells the
 * listener, and returns why the sample stops now, if it does.
 */
export function appendToken(
  a: LocalSample,
  token: number,
  logprob: number,
  version: number,
  tokenizer: ChatTokenizer | undefined,
  top?: TopLogprobs,
): StopReason | undefined {
  a.tokens.push(token);
  a.logprobs.push(logprob);
  a.versions.push(version);
  if (top) a.tops.push(top);
  if (a.onTokens) {
    // A listener's error must not stop the decoding every other request shares.
    try {
      a.onTokens({
        sample: a.sample,
        tokens: [token],
        logprobs: [logprob],
        ...(top ? { top: [top] } : {}),
      });
    } catch {
      a.onTokens = undefined;
    }
  }
  const n = a.tokens.length;
  if (n >= a.minNew && a.stopIds.has(token)) return 'stop';
  if (n >= a.minNew && a.stop.length) {
    const text = tokenizer!.decode(a.tokens.slice(-64));
    if (a.stop.some((s) => text.endsWith(s))) return 'stop';
  }
  if (n >= a.maxNew) return 'length';
  return undefined;
}

/**
 * Prompt plus output so far: what a sample's KV cache holds, and what it is prefilled with again
 * when a weight update made that cache stale (interruptible generation: the next token is then
 * computed by the new weights over a cache of the new weights only, and labelled with their
 * version).
 */
export function sampleContext(a: LocalSample): number[] {
  return a.tokens.length ? a.prompt.concat(a.tokens) : a.prompt;
}

/** Resolves `a` with what it generated and why it stopped. */
export function resolveSample(a: LocalSample, reason: StopReason): void {
  a.resolve({
    outputTokens: a.tokens,
    outputLogprobs: a.logprobs,
    outputVersions: a.versions,
    ...(a.topN > 0 ? { outputTopLogprobs: a.tops } : {}),
    stopReason: reason,
    latencyMs: performance.now() - a.startMs,
  });
}
