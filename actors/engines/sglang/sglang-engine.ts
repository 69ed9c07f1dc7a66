/**
 * The SGLang proxy engine: speaks SGLang's native HTTP API (`POST /generate` with `input_ids`).
 *
 * Logprob convention: SGLang reports logprobs after temperature scaling (before top-p/top-k
 * truncation), which is what the engine contract asks for, so they are passed through. A server
 * started with `SGLANG_RETURN_ORIGINAL_LOGPROB=1` reports them before temperature: set
 * `returnOriginalLogprob: true` and the engine refuses temperatures other than 1.
 *
 * @module
 */
import { EngineError } from '../http/errors.ts';
import {
  callOptional,
  expectShape,
  requireTemperedOrUnitTemperature,
  sharedSamplingFields,
} from '../http/protocol-util.ts';
import {
  RemoteEngine,
  type EngineProtocol,
  type RemoteEngineOptions,
  type ResolvedGenerationConfig,
  type SampleOutput,
} from '../http/remote-engine.ts';
import type { StopReason } from '../types.ts';

/** Options of {@link SglangEngine}. */
export interface SglangEngineOptions extends RemoteEngineOptions {
  /** The servers run with `SGLANG_RETURN_ORIGINAL_LOGPROB=1` (logprobs before temperature). @default false */
  returnOriginalLogprob?: boolean;
  /**
   * The servers run with `--incremental-streaming-output` (a streamed event carries only its new
   * tokens' logprobs, not the whole output's). @default false
   */
  incrementalStreamingOutput?: boolean;
  /** What `sleep()` releases (`/release_memory_occupation` tags); unset releases everything. */
  sleepTags?: string[];
  /** Extra `sampling_params` sent with every request, e.g. `{ skip_special_tokens: false }`. @default {} */
  extraSamplingParams?: Record<string, unknown>;
}

/** The wire form of one `/generate` answer (the fields this engine reads). */
interface SglangOutput {
  output_ids?: number[];
  meta_info?: {
    finish_reason?: { type?: string; message?: string; matched?: unknown; length?: number } | null;
    output_token_logprobs?: Array<[number, number, string | null]>;
    weight_version?: string;
  };
}

/** The request and response mapping for SGLang's native server. */
export function sglangProtocol(opts: SglangEngineOptions = { urls: [] }): EngineProtocol {
  const raw = opts.returnOriginalLogprob ?? false;
  const incremental = opts.incrementalStreamingOutput ?? false;
  return {
    kind: 'sglang',
    checkConfig(g) {
      requireTemperedOrUnitTemperature(
        raw,
        g.temperature,
        g.greedy,
        'unset SGLANG_RETURN_ORIGINAL_LOGPROB on the server and returnOriginalLogprob here',
      );
    },
    generateRequest(inputIds, g, n, stream) {
      return {
        path: '/generate',
        body: {
          input_ids: inputIds,
          sampling_params: samplingParams(g, n, opts.extraSamplingParams),
          return_logprob: true,
          stream,
        },
      };
    },
    parseGenerate(json, n, url) {
      const items = Array.isArray(json) ? json : [json];
      expectShape(items.length === n, url, `expected ${n} outputs, got ${items.length}`);
      return items.map((item) => parseOutput(item as SglangOutput, url));
    },
    streamReader(n, url) {
      // Each event carries one sample's output (`index` says which when n > 1). By default its
      // output_token_logprobs are the whole output so far, so what is new follows the previous
      // event's; a server run with --incremental-streaming-output sends only the new ones.
      const outs = Array.from({ length: n }, () => ({
        tokens: [] as number[],
        logprobs: [] as number[],
        finish: undefined as SampleOutput | undefined,
      }));
      return {
        read(json) {
          const item = json as SglangOutput & { index?: number };
          const i = item?.index ?? 0;
          expectShape(Number.isInteger(i) && i >= 0 && i < n, url, `event for sample ${i} of ${n}`);
          const o = outs[i]!;
          const ended = item.meta_info?.finish_reason ? parseOutput(item, url) : undefined;
          const got = ended ?? parseLogprobs(item, url);
          const from = incremental ? 0 : o.tokens.length;
          expectShape(got.tokens.length >= from, url, 'a streamed output shrank');
          const tokens = got.tokens.slice(from);
          const logprobs = got.logprobs.slice(from);
          o.tokens.push(...tokens);
          o.logprobs.push(...logprobs);
          o.finish = ended;
          return tokens.length > 0 ? [{ sample: i, tokens, logprobs }] : [];
        },
        end() {
          return outs.map((o) => {
            expectShape(o.finish, url, 'the stream ended before every sample finished');
            return { ...o.finish, tokens: o.tokens, logprobs: o.logprobs };
          });
        },
      };
    },
    // A failed update_weights_from_disk reloads the previous weights before answering.
    atomicReload: true,
    pauseServer: (call) => callOptional(call, '/pause_generation', { mode: 'abort' }),
    async continueServer(call) {
      await callOptional(call, '/continue_generation', {});
    },
    async reloadWeights(call, path, version) {
      const res = (await call('/update_weights_from_disk', {
        model_path: path,
        weight_version: String(version),
        abort_all_requests: true,
        flush_cache: true,
      })) as { success?: boolean; message?: string } | null;
      if (!res || res.success !== true) {
        throw new EngineError(
          'http',
          `update_weights_from_disk failed: ${res?.message ?? 'no answer'}`,
        );
      }
    },
    async sleep(call) {
      await call('/release_memory_occupation', opts.sleepTags ? { tags: opts.sleepTags } : {});
    },
    async wakeUp(call) {
      await call('/resume_memory_occupation', opts.sleepTags ? { tags: opts.sleepTags } : {});
    },
  };
}

/** `GenerationConfig` → SGLang `sampling_params`, field by field. */
export function samplingParams(
  g: ResolvedGenerationConfig,
  n: number,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  const p: Record<string, unknown> = {
    max_new_tokens: g.maxNewTokens,
    min_new_tokens: g.minNewTokens,
    ...sharedSamplingFields(g),
    ...extra,
  };
  if (g.stop.length > 0) p.stop = g.stop;
  if (n > 1) p.n = n;
  if (g.seed !== undefined) p.sampling_seed = g.seed;
  return p;
}

function parseOutput(o: SglangOutput, url: string): SampleOutput {
  const { tokens, logprobs } = parseLogprobs(o, url);
  const fr = o.meta_info!.finish_reason;
  let finish: StopReason;
  if (!fr || fr.type === 'length') finish = 'length';
  else if (fr.type === 'stop') finish = 'stop';
  else if (fr.type === 'abort') finish = 'abort';
  else
    throw new EngineError('protocol', `unknown finish_reason ${JSON.stringify(fr)} from ${url}`, {
      url,
    });
  return fr?.type === 'abort'
    ? { tokens, logprobs, finish, abortMessage: fr.message ?? '' }
    : { tokens, logprobs, finish };
}

/** The tokens and logprobs of one output, from `meta_info.output_token_logprobs`. */
function parseLogprobs(o: SglangOutput, url: string): { tokens: number[]; logprobs: number[] } {
  const meta = o?.meta_info;
  expectShape(
    meta && Array.isArray(meta.output_token_logprobs),
    url,
    'no meta_info.output_token_logprobs (was return_logprob sent?)',
  );
  const tokens: number[] = [];
  const logprobs: number[] = [];
  for (const entry of meta.output_token_logprobs!) {
    expectShape(
      Array.isArray(entry) && typeof entry[0] === 'number' && Number.isInteger(entry[1]),
      url,
      `bad output_token_logprobs entry ${JSON.stringify(entry)}`,
    );
    logprobs.push(entry[0]);
    tokens.push(entry[1]);
  }
  return { tokens, logprobs };
}

/**
 * An {@link InferenceEngine} backed by one or more SGLang servers.
 *
 * @example
 * const engine = new SglangEngine({ urls: ['http://10.0.0.5:30000', 'http://10.0.0.6:30000'] });
 * const r = await engine.generate({ rid: 'episode-7', inputIds: [1, 2, 3], gconfig: { maxNewTokens: 64 } });
 */
export class SglangEngine extends RemoteEngine {
  constructor(options: SglangEngineOptions) {
    super(sglangProtocol(options), options);
  }
}
