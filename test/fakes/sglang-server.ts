/**
 * A fake SGLang server that follows SGLang's native HTTP API as documented in
 * shared/reference/areal-verl-engines.md §3a: `/generate` (token-id input, `sampling_params`,
 * `return_logprob`, `meta_info.output_token_logprobs` as `[logprob, token_id, null]`, with
 * `top_logprobs_num: k` `meta_info.output_top_logprobs` (per position the k most likely as
 * `[logprob, token_id, null]`, most likely first),
 * `finish_reason` stop/length/abort, a JSON array when `n > 1`; with `"stream": true` one SSE
 * event per generated token with the output so far, then each sample's finished one and
 * `[DONE]`), `/health`,
 * `/pause_generation` (abort mode returns running requests with their partial output and holds
 * new ones), `/continue_generation`, `/update_weights_from_disk`, `/release_memory_occupation`,
 * `/resume_memory_occupation`, `/get_model_info`, `/flush_cache`, `/abort_request`; started with
 * LoRA (`lora` option, as `--enable-lora`), `/load_lora_adapter {lora_name, lora_path}` and
 * `/unload_lora_adapter {lora_name}` (answering `{success, error_message, loaded_adapters}`,
 * 400 when not successful; an unload waits for the requests under the adapter), and `/generate`
 * with `lora_path: <name>` (an adapter not loaded is a 400).
 *
 * Runnable alone: `node --import tsx test/fakes/sglang-server.ts --port 0` prints
 * `listening on http://127.0.0.1:PORT`.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';

import {
  FakeServer,
  parseFakeArgs,
  runStandalone,
  sampleParams,
  sliceSequence,
  type FakeServerOptions,
  type RouteAnswer,
  type WireSamplingFields,
} from './fake-server.ts';
import { DeterministicGenerator, type GeneratedSequence } from './token-generator.ts';

/** Options of {@link FakeSglangServer}. */
export interface FakeSglangOptions extends FakeServerOptions {
  /** Like `SGLANG_RETURN_ORIGINAL_LOGPROB=1`: logprobs before temperature. @default false */
  returnOriginalLogprob?: boolean;
  /** Like `--incremental-streaming-output`: streamed events carry only what is new. @default false */
  incrementalStreamingOutput?: boolean;
  /** Like `--enable-memory-saver` (needed by the memory routes). @default true */
  enableMemorySaver?: boolean;
}

interface SamplingParams extends WireSamplingFields {
  max_new_tokens?: number;
  min_new_tokens?: number;
  sampling_seed?: number;
  no_stop_trim?: boolean;
}

interface GenerateBody {
  input_ids?: unknown;
  text?: unknown;
  sampling_params?: SamplingParams;
  return_logprob?: boolean;
  top_logprobs_num?: number;
  stream?: boolean;
  rid?: string;
  lora_path?: string | null;
}

/** A loopback SGLang look-alike; see the module comment. */
export class FakeSglangServer extends FakeServer {
  private readonly returnOriginalLogprob: boolean;
  private readonly memorySaver: boolean;
  private readonly incremental: boolean;

  /** Starts one on an ephemeral port. */
  static start(opts: FakeSglangOptions = {}): Promise<FakeSglangServer> {
    return new FakeSglangServer(opts).listen();
  }

  constructor(opts: FakeSglangOptions = {}) {
    super(opts);
    this.returnOriginalLogprob = opts.returnOriginalLogprob ?? false;
    this.memorySaver = opts.enableMemorySaver ?? true;
    this.incremental = opts.incrementalStreamingOutput ?? false;
    this.route('POST', '/generate', (r) => this.generate(r.body as GenerateBody));
    this.route('GET', '/health_generate', () =>
      this.healthMode === 'ok' && !this.asleep ? undefined : { status: 503, text: '' },
    );
    this.route('GET', '/get_model_info', () => ({
      json: {
        model_path: this.modelPath,
        tokenizer_path: this.modelPath,
        is_generation: true,
        preferred_sampling_params: null,
        weight_version: this.weightVersion,
        has_image_understanding: false,
        has_audio_understanding: false,
      },
    }));
    this.route('POST', '/flush_cache', () => this.flushCache());
    this.route('GET', '/flush_cache', () => this.flushCache());
    this.route('POST', '/pause_generation', (r) =>
      this.pause((r.body as { mode?: string } | undefined)?.mode ?? 'abort'),
    );
    this.route('POST', '/continue_generation', async () => {
      await this.resumeGeneration();
      return { json: { message: 'Generation continued successfully.', status: 'ok' } };
    });
    this.route('POST', '/update_weights_from_disk', (r) =>
      this.updateFromDisk(r.body as Record<string, unknown>),
    );
    this.route('POST', '/release_memory_occupation', () => this.memory(true));
    this.route('POST', '/resume_memory_occupation', () => this.memory(false));
    this.route('POST', '/load_lora_adapter', async (r) => {
      const b = r.body as { lora_name?: string; lora_path?: string } | undefined;
      return this.loraAnswer(await this.loadAdapter(b?.lora_name ?? '', b?.lora_path ?? ''));
    });
    this.route('POST', '/unload_lora_adapter', async (r) => {
      const b = r.body as { lora_name?: string } | undefined;
      return this.loraAnswer(await this.unloadAdapter(b?.lora_name ?? '', true));
    });
    this.route('POST', '/abort_request', (r) => {
      const b = r.body as { abort_all?: boolean } | undefined;
      if (b?.abort_all) this.abortAll();
      return undefined;
    });
  }

  private async generate(body: GenerateBody): Promise<RouteAnswer> {
    const injected = await this.beforeGenerate(body);
    if (injected) return injected;
    const ids = body?.input_ids;
    if (!Array.isArray(ids) || !ids.every((t) => Number.isInteger(t))) {
      return bad(
        body?.text !== undefined
          ? 'this fake server takes input_ids, not text'
          : 'input_ids must be a list of token ids',
      );
    }
    if (ids.length >= this.contextLength) {
      return bad(
        `The input (${ids.length} tokens) is longer than the model's context length (${this.contextLength} tokens).`,
      );
    }
    if (this.asleep)
      return {
        status: 500,
        json: {
          object: 'error',
          message: 'memory is released; call /resume_memory_occupation',
          code: 500,
        },
      };
    const sp = body.sampling_params ?? {};
    const n = sp.n ?? 1;
    await this.whilePaused();
    const name = body.lora_path ?? undefined;
    const adapter = name === undefined ? undefined : this.adapters.get(name);
    if (name !== undefined && !adapter)
      return bad(
        `The following requested LoRA adapters are not loaded: ${name}\nLoaded adapters: ${[...this.adapters.keys()].join(', ')}.`,
      );
    const started = Date.now();
    const cached = this.cachedTokens(ids as number[]);
    const maxNew = Math.min(sp.max_new_tokens ?? 128, this.contextLength - ids.length);
    const params = sampleParams(sp, {
      inputIds: ids as number[],
      maxNewTokens: maxNew,
      minNewTokens: sp.min_new_tokens ?? 0,
      ...(sp.sampling_seed === undefined ? {} : { seed: sp.sampling_seed }),
      ...(body.return_logprob && body.top_logprobs_num
        ? { topLogprobs: body.top_logprobs_num }
        : {}),
      ...(adapter ? { adapter: { name: adapter.name, lora: adapter.lora } } : {}),
    });
    const output = (s: Readonly<GeneratedSequence>, running = false) =>
      this.output(
        s,
        ids.length,
        cached,
        started,
        body.return_logprob === true,
        params.temperature,
        sp.no_stop_trim === true,
        running,
      );
    if (body.stream) {
      // An event per generated token with the sample's output so far (cumulative text, ids and
      // logprobs; with incrementalStreamingOutput only what is new since the last event; `index`
      // names the sample when n > 1), then each sample's last one with its finish_reason.
      const sent = Array.from({ length: n }, () => 0);
      const event = (i: number, s: Readonly<GeneratedSequence>, running: boolean) => {
        const from = this.incremental ? sent[i]! : 0;
        sent[i] = s.tokens.length;
        const o = output(sliceSequence(s, from), running);
        return n > 1 ? { ...o, index: i } : o;
      };
      return {
        sse: async (send) => {
          const samples = await this.sampleAll(n, params, (i, s) => send(event(i, s, true)));
          await this.delayAnswer();
          samples.forEach((s, i) => send(event(i, s, false)));
        },
      };
    }
    const samples = await this.sampleAll(n, params);
    await this.delayAnswer();
    const outs = samples.map((s) => output(s));
    return { json: n === 1 ? outs[0] : outs };
  }

  private output(
    s: Readonly<GeneratedSequence>,
    promptTokens: number,
    cached: number,
    started: number,
    withLogprob: boolean,
    temperature: number,
    noStopTrim: boolean,
    running = false,
  ) {
    const useRaw = this.returnOriginalLogprob && temperature !== 0 && temperature !== 1;
    if (useRaw && !s.rawLogprobs)
      throw new Error('the generator cannot report logprobs before temperature');
    const lps = useRaw ? s.rawLogprobs! : s.logprobs;
    const top = s.top?.map((a) => {
      const l = useRaw ? a.rawLogprobs! : a.logprobs;
      return a.ids.map((id, j) => [l[j], id, null]);
    });
    let text = this.generator.decode(s.tokens);
    if (s.finish === 'stop' && typeof s.matched === 'string' && !noStopTrim)
      text = text.slice(0, text.length - s.matched.length);
    const finishReason = running
      ? null
      : s.finish === 'stop'
        ? { type: 'stop', matched: s.matched ?? null }
        : s.finish === 'length'
          ? { type: 'length', length: s.tokens.length }
          : {
              type: 'abort',
              message: s.tokens.length === 0 ? 'Abort before prefill' : 'Abort in running batch',
            };
    return {
      text,
      output_ids: s.tokens,
      meta_info: {
        id: randomBytes(16).toString('hex'),
        finish_reason: finishReason,
        prompt_tokens: promptTokens,
        completion_tokens: s.tokens.length,
        cached_tokens: cached,
        weight_version: this.weightVersion,
        ...(withLogprob
          ? {
              output_token_logprobs: s.tokens.map((t, i) => [lps[i], t, null]),
              input_token_logprobs: [],
              ...(top ? { output_top_logprobs: top, input_top_logprobs: [] } : {}),
            }
          : {}),
        e2e_latency: (Date.now() - started) / 1000,
      },
    };
  }

  private async pause(mode: string): Promise<RouteAnswer> {
    if (!['abort', 'retract', 'in_place'].includes(mode)) return bad(`unknown pause mode ${mode}`);
    await this.pauseGeneration(mode);
    return { json: { message: 'Generation paused successfully.', status: 'ok' } };
  }

  private async updateFromDisk(b: Record<string, unknown> | undefined): Promise<RouteAnswer> {
    const path = b?.model_path;
    if (typeof path !== 'string') return bad('model_path is required');
    const pausedRequests = b?.abort_all_requests === true ? this.abortAll() : 0;
    const version = typeof b?.weight_version === 'string' ? b.weight_version : this.weightVersion;
    try {
      await this.loadWeights(
        path,
        Number.isFinite(Number(version)) ? Number(version) : this.stats.weightLoads + 1,
      );
    } catch (e) {
      return {
        status: 400,
        json: {
          success: false,
          message: `Failed to update weights: ${(e as Error).message}`,
          num_paused_requests: pausedRequests,
        },
      };
    }
    this.weightVersion = version;
    this.changed();
    return {
      json: {
        success: true,
        message: 'Succeeded to update model weights.',
        num_paused_requests: pausedRequests,
      },
    };
  }

  /** SGLang's `LoRAUpdateOutput`: 200 on success, 400 with the reason otherwise. */
  private loraAnswer(error: string | undefined): RouteAnswer {
    const loaded = Object.fromEntries([...this.adapters.values()].map((a) => [a.name, a.path]));
    return error === undefined
      ? { json: { success: true, error_message: null, loaded_adapters: loaded } }
      : { status: 400, json: { success: false, error_message: error, loaded_adapters: loaded } };
  }

  private memory(release: boolean): RouteAnswer {
    if (!this.memorySaver) return bad('memory saver is not enabled (--enable-memory-saver)');
    if (release && this.running.size > 0) {
      return {
        status: 500,
        json: {
          object: 'error',
          message: 'release_memory_occupation requires an idle engine',
          code: 500,
        },
      };
    }
    this.asleep = release;
    this.changed();
    return undefined;
  }

  private flushCache(): RouteAnswer {
    if (this.running.size > 0)
      return {
        status: 400,
        text: 'Cache not flushed. Please check if there are pending requests.',
      };
    return {
      text: 'Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n',
    };
  }
}

function bad(message: string): RouteAnswer {
  return { status: 400, json: { object: 'error', message, type: 'BadRequestError', code: 400 } };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const a = parseFakeArgs(process.argv.slice(2));
  const generator = new DeterministicGenerator({
    vocabSize: a.vocabSize,
    tokenDelayMs: a.tokenDelayMs,
  });
  await runStandalone(
    new FakeSglangServer({
      port: a.port,
      generator,
      ...(a.modelPath ? { modelPath: a.modelPath } : {}),
      ...(a.extra.has('enable-lora')
        ? {
            lora: {
              maxLoaded: Number(a.extra.get('max-loaded-loras') ?? Infinity),
              maxRank: Number(a.extra.get('max-lora-rank') ?? 16),
            },
          }
        : {}),
    }),
  );
}
