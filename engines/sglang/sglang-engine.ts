/**
 * The SGLang proxy engine: speaks SGLang's native HTTP API (`POST /generate` with `input_ids`).
 * Alternatives (`gconfig.topLogprobs: k`) are asked with `top_logprobs_num: k` and read from
 * `meta_info.output_top_logprobs` (per position, `[logprob, token_id, text|null]` entries, most
 * likely first; same temperature convention as the sampled token's).
 *
 * Logprob convention: SGLang reports logprobs after temperature scaling (before top-p/top-k
 * truncation), which is what the engine contract asks for, so they are passed through. A server
 * started with `SGLANG_RETURN_ORIGINAL_LOGPROB=1` reports them before temperature: set
 * `returnOriginalLogprob: true` and the engine refuses temperatures other than 1.
 *
 * LoRA (a server started with `--enable-lora`, see `loraServerArgs`): adapters are loaded with
 * `POST /load_lora_adapter {lora_name, lora_path}` and unloaded with `POST /unload_lora_adapter
 * {lora_name}` (both answer `{success, error_message}`; an unload waits for the requests under
 * the adapter), and a request runs under one with `lora_path: <name>` in `/generate`.
 *
 * @module
 */
import { EngineError } from '../http/errors.ts';
import {
  callOptional,
  expectShape,
  mostLikelyFirst,
  requireTemperedOrUnitTemperature,
  sharedSamplingFields,
  streamedSamples,
} from '../http/protocol-util.ts';
import {
  RemoteEngine,
  type EngineProtocol,
  type RemoteEngineOptions,
  sliceTokens,
  type ResolvedGenerationConfig,
  type SampleOutput,
  type SampleTokens,
  type ServerCall,
} from '../http/remote-engine.ts';
import type { StopReason, TopLogprobs } from '../types.ts';
import { sglangDistributedRoutes } from './distributed-routes.ts';

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
    /** With `top_logprobs_num`: per position, the most likely tokens (null where none). */
    output_top_logprobs?: Array<Array<[number, number, string | null]> | null>;
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
    generateRequest(inputIds, g, n, stream, adapter) {
      return {
        path: '/generate',
        body: {
          input_ids: inputIds,
          sampling_params: samplingParams(g, n, opts.extraSamplingParams),
          return_logprob: true,
          ...(g.topLogprobs > 0 ? { top_logprobs_num: g.topLogprobs } : {}),
          ...(adapter === undefined ? {} : { lora_path: adapter }),
          stream,
        },
      };
    },
    parseGenerate(json, n, url, top) {
      const items = Array.isArray(json) ? json : [json];
      expectShape(items.length === n, url, `expected ${n} outputs, got ${items.length}`);
      return items.map((item) => parseOutput(item as SglangOutput, url, top));
    },
    streamReader(n, url, top) {
      // Each event carries one sample's output (`index` says which when n > 1). By default its
      // output_token_logprobs (and output_top_logprobs) are the whole output so far, so what is
      // new follows the previous event's; a server run with --incremental-streaming-output sends
      // only the new ones.
      const outs = streamedSamples<SampleOutput>(n, top);
      return {
        read(json) {
          const item = json as SglangOutput & { index?: number };
          const i = item?.index ?? 0;
          expectShape(Number.isInteger(i) && i >= 0 && i < n, url, `event for sample ${i} of ${n}`);
          const ended = item.meta_info?.finish_reason ? parseOutput(item, url, top) : undefined;
          const got = ended ?? parseLogprobs(item, url, top);
          const from = incremental ? 0 : outs.length(i);
          expectShape(got.tokens.length >= from, url, 'a streamed output shrank');
          return outs.add(i, sliceTokens(got, from), ended);
        },
        end() {
          return outs
            .end(url, 'the stream ended before every sample finished')
            .map(({ finish, ...sofar }) => ({ ...finish, ...sofar }));
        },
      };
    },
    // A failed update_weights_from_disk reloads the previous weights before answering.
    atomicReload: true,
    distributed: sglangDistributedRoutes,
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
          'HTTP_STATUS',
          `update_weights_from_disk failed: ${res?.message ?? 'no answer'}`,
        );
      }
    },
    async loadAdapter(call, name, path) {
      await loraUpdate(call, '/load_lora_adapter', { lora_name: name, lora_path: path });
    },
    async unloadAdapter(call, name) {
      await loraUpdate(call, '/unload_lora_adapter', { lora_name: name });
    },
    async sleep(call) {
      await call('/release_memory_occupation', opts.sleepTags ? { tags: opts.sleepTags } : {});
    },
    async wakeUp(call) {
      await call('/resume_memory_occupation', opts.sleepTags ? { tags: opts.sleepTags } : {});
    },
  };
}

/** A LoRA route; its `LoRAUpdateOutput` must say `success` (a 400 with the reason otherwise). */
async function loraUpdate(
  call: ServerCall,
  route: string,
  body: Record<string, string>,
): Promise<void> {
  const res = (await call(route, body)) as { success?: boolean; error_message?: string } | null;
  if (!res || res.success !== true)
    throw new EngineError(
      'HTTP_STATUS',
      `${route.slice(1)} ${body.lora_name}: ${res?.error_message ?? 'no answer'}`,
    );
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

function parseOutput(o: SglangOutput, url: string, top: number): SampleOutput {
  const got = parseLogprobs(o, url, top);
  const fr = o.meta_info!.finish_reason;
  let finish: StopReason;
  if (!fr || fr.type === 'length') finish = 'length';
  else if (fr.type === 'stop') finish = 'stop';
  else if (fr.type === 'abort') finish = 'abort';
  else
    throw new EngineError('PROTOCOL', `unknown finish_reason ${JSON.stringify(fr)} from ${url}`, {
      url,
    });
  return fr?.type === 'abort'
    ? { ...got, finish, abortMessage: fr.message ?? '' }
    : { ...got, finish };
}

/**
 * The tokens and logprobs of one output, from `meta_info.output_token_logprobs`, and with `top`
 * their alternatives from `meta_info.output_top_logprobs`.
 */
function parseLogprobs(o: SglangOutput, url: string, top: number): SampleTokens {
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
  if (top === 0) return { tokens, logprobs };
  const rows = meta.output_top_logprobs;
  expectShape(
    Array.isArray(rows) && rows.length === tokens.length,
    url,
    'meta_info.output_top_logprobs is missing or not one entry per token (was top_logprobs_num sent?)',
  );
  return { tokens, logprobs, top: rows.map((row) => alternatives(row, url)) };
}

/** One position's `[logprob, token_id, text]` entries (null: none) as the most likely first. */
function alternatives(row: unknown, url: string): TopLogprobs {
  if (row === null) return { ids: [], logprobs: [] };
  expectShape(Array.isArray(row), url, `bad output_top_logprobs entry ${JSON.stringify(row)}`);
  const pairs = row.map((e: unknown) => {
    expectShape(
      Array.isArray(e) && typeof e[0] === 'number' && Number.isInteger(e[1]),
      url,
      `bad output_top_logprobs entry ${JSON.stringify(e)}`,
    );
    return [e[1] as number, e[0] as number] as const;
  });
  return mostLikelyFirst(pairs);
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
