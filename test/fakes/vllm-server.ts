/**
 * A fake vLLM OpenAI-compatible server following shared/reference/areal-verl-engines.md §3b:
 * `/v1/completions` with a token-id `prompt` (`logprobs`, `return_tokens_as_token_ids` giving
 * `token_id:N` tokens, `token_logprobs`, `top_logprobs` (per position the sampled token, then
 * the `logprobs` most likely: up to `logprobs + 1` entries), `text_offset`, `finish_reason`,
 * `stop_reason`, `usage`; with `stream: true` completion chunks, one per generated token, then
 * one per choice with its `finish_reason`, and `[DONE]`), `/health`, `/v1/models`, and the dev-mode routes
 * (`VLLM_SERVER_DEV_MODE=1`): `/sleep?level=`, `/wake_up?tags=`, `/is_sleeping`,
 * `/collective_rpc`, `/reset_prefix_cache`, `/pause?mode=`, `/resume`, `/is_paused`, and AReaL's
 * `/areal_update_weights`. Logprobs are raw (before temperature) unless started with
 * `logprobsMode: 'processed_logprobs'`, as with `--logprobs-mode`. Started with LoRA (`lora`
 * option, as `--enable-lora` with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`):
 * `/v1/load_lora_adapter {lora_name, lora_path}` and `/v1/unload_lora_adapter {lora_name}`
 * (200 with a text line; a name taken is a 400, an unknown one a 404, as `{"error": ...}`), a
 * completion whose `model` names a loaded adapter runs under it, and `/v1/models` lists them.
 *
 * Runnable alone: `node --import tsx test/fakes/vllm-server.ts --port 0 [--model DIR]`.
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

/** Options of {@link FakeVllmServer}. */
export interface FakeVllmOptions extends FakeServerOptions {
  /** Like `--logprobs-mode`. @default 'raw_logprobs' */
  logprobsMode?: 'raw_logprobs' | 'processed_logprobs';
  /** Like `VLLM_SERVER_DEV_MODE=1` (sleep, pause, collective_rpc routes). @default true */
  devMode?: boolean;
  /** The name in `/v1/models` and the `model` field. @default the model path */
  servedModelName?: string;
  /** Like `--max-logprobs`: the largest `logprobs` a request may ask. @default 20 */
  maxLogprobs?: number;
}

interface CompletionBody extends WireSamplingFields {
  model?: string;
  prompt?: unknown;
  max_tokens?: number;
  min_tokens?: number;
  seed?: number;
  logprobs?: number | null;
  return_tokens_as_token_ids?: boolean;
  include_stop_str_in_output?: boolean;
  stream?: boolean;
}

/** A loopback vLLM look-alike; see the module comment. */
export class FakeVllmServer extends FakeServer {
  private readonly processed: boolean;
  private readonly servedName: string;
  private readonly maxLogprobs: number;
  private sleepLevel = 0;
  private weightsAsleep = false;
  private kvAsleep = false;
  private weightsDiscarded = false;

  /** Starts one on an ephemeral port. */
  static start(opts: FakeVllmOptions = {}): Promise<FakeVllmServer> {
    return new FakeVllmServer(opts).listen();
  }

  constructor(opts: FakeVllmOptions = {}) {
    super(opts);
    this.processed = opts.logprobsMode === 'processed_logprobs';
    this.servedName = opts.servedModelName ?? this.modelPath;
    this.maxLogprobs = opts.maxLogprobs ?? 20;
    this.route('POST', '/v1/completions', (r) => this.complete(r.body as CompletionBody));
    this.route('GET', '/v1/models', () => ({
      json: {
        object: 'list',
        data: [
          {
            id: this.servedName,
            object: 'model',
            created: 0,
            owned_by: 'vllm',
            root: this.modelPath,
            parent: null,
            max_model_len: this.contextLength,
          },
          ...[...this.adapters.values()].map((a) => ({
            id: a.name,
            object: 'model',
            created: 0,
            owned_by: 'vllm',
            root: a.path,
            parent: this.servedName,
          })),
        ],
      },
    }));
    if (opts.lora) {
      // Only with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; otherwise the routes do not exist.
      this.route('POST', '/v1/load_lora_adapter', async (r) => {
        const b = r.body as { lora_name?: string; lora_path?: string } | undefined;
        const why = await this.loadAdapter(b?.lora_name ?? '', b?.lora_path ?? '');
        return why === undefined
          ? { text: `Success: LoRA adapter '${b!.lora_name}' added successfully.` }
          : err(400, why);
      });
      this.route('POST', '/v1/unload_lora_adapter', async (r) => {
        const b = r.body as { lora_name?: string } | undefined;
        const why = await this.unloadAdapter(b?.lora_name ?? '', false);
        return why === undefined
          ? { text: `Success: LoRA adapter '${b!.lora_name}' removed successfully.` }
          : err(404, why);
      });
    }
    this.route('POST', '/areal_update_weights', (r) =>
      this.arealUpdate(r.body as { model_path?: unknown }),
    );
    if (opts.devMode ?? true) this.devRoutes();
  }

  private devRoutes(): void {
    this.route('POST', '/sleep', (r) => {
      const level = Number(r.query.get('level') ?? 1);
      if (level !== 1 && level !== 2) return err(400, `invalid sleep level ${level}`);
      this.abortAll();
      this.sleepLevel = level;
      this.weightsAsleep = this.kvAsleep = true;
      if (level === 2) this.weightsDiscarded = true;
      this.changed();
      return undefined;
    });
    this.route('POST', '/wake_up', (r) => {
      const tags = r.query.getAll('tags');
      if (tags.length === 0 || tags.includes('weights')) this.weightsAsleep = false;
      if (tags.length === 0 || tags.includes('kv_cache')) this.kvAsleep = false;
      if (!this.weightsAsleep && !this.kvAsleep) this.sleepLevel = 0;
      this.changed();
      return undefined;
    });
    this.route('GET', '/is_sleeping', () => ({ json: { is_sleeping: this.sleeping } }));
    this.route('POST', '/collective_rpc', (r) =>
      this.collectiveRpc(r.body as { method?: unknown }),
    );
    this.route('POST', '/reset_prefix_cache', () => undefined);
    this.route('POST', '/pause', async (r) => {
      const mode = r.query.get('mode') ?? 'abort';
      if (!['abort', 'wait', 'keep'].includes(mode)) return err(400, `invalid mode ${mode}`);
      await this.pauseGeneration(mode);
      if (mode === 'wait') await this.whenIdle();
      return { json: { status: 'paused' } };
    });
    this.route('POST', '/resume', async () => {
      await this.resumeGeneration();
      return { json: { status: 'resumed' } };
    });
    this.route('GET', '/is_paused', () => ({ json: { is_paused: this.paused } }));
  }

  private get sleeping(): boolean {
    return this.sleepLevel > 0;
  }

  private async complete(body: CompletionBody): Promise<RouteAnswer> {
    const injected = await this.beforeGenerate(body);
    if (injected) return injected;
    const adapter = body?.model === undefined ? undefined : this.adapters.get(body.model);
    if (body?.model !== undefined && body.model !== this.servedName && !adapter) {
      return {
        status: 404,
        json: {
          error: {
            message: `The model \`${body.model}\` does not exist.`,
            type: 'NotFoundError',
            param: 'model',
            code: 404,
          },
        },
      };
    }
    const prompt = body?.prompt;
    if (!Array.isArray(prompt) || !prompt.every((t) => Number.isInteger(t)))
      return err(400, 'this fake server takes a token-id prompt (int[])');
    const maxTokens = body.max_tokens ?? this.contextLength - prompt.length;
    if (prompt.length + maxTokens > this.contextLength) {
      return err(
        400,
        `This model's maximum context length is ${this.contextLength} tokens. However, you requested ${prompt.length + maxTokens} tokens (${prompt.length} in the messages, ${maxTokens} in the completion). Please reduce the length of the messages or completion.`,
      );
    }
    if ((body.logprobs ?? 0) > this.maxLogprobs)
      return err(
        400,
        `Requested sample logprobs of ${body.logprobs}, which is greater than max allowed: ${this.maxLogprobs}`,
      );
    if (this.sleeping) return err(500, 'the engine is sleeping; call /wake_up');
    await this.whilePaused();
    const n = body.n ?? 1;
    const cached = this.cachedTokens(prompt as number[]);
    const params = sampleParams(body, {
      inputIds: prompt as number[],
      maxNewTokens: maxTokens,
      minNewTokens: body.min_tokens ?? 0,
      ...(body.seed === undefined ? {} : { seed: body.seed }),
      ...(body.logprobs ? { topLogprobs: body.logprobs } : {}),
      ...(adapter ? { adapter: { name: adapter.name, lora: adapter.lora } } : {}),
    });
    const id = `cmpl-${randomBytes(16).toString('hex')}`;
    if (body.stream) {
      // OpenAI completion chunks: one per generated token with that token alone (its text,
      // logprob and token id), then one per choice with its finish_reason and no new token.
      const chunk = (choices: unknown[]) => ({
        id,
        object: 'text_completion',
        created: Math.floor(Date.now() / 1000),
        model: this.servedName,
        choices,
      });
      return {
        sse: async (send) => {
          const samples = await this.sampleAll(n, params, (i, s) => {
            const last = sliceSequence(s, s.tokens.length - 1);
            const c = this.choice(last, i, body, params.temperature);
            send(chunk([{ ...c, finish_reason: null, stop_reason: null }]));
          });
          await this.delayAnswer();
          samples.forEach((s, i) => {
            const c = this.choice(sliceSequence(s, s.tokens.length), i, body, params.temperature);
            send(chunk([{ ...c, text: '' }]));
          });
        },
      };
    }
    const samples = await this.sampleAll(n, params);
    await this.delayAnswer();
    const choices = samples.map((s, i) => this.choice(s, i, body, params.temperature));
    const completion = samples.reduce((a, s) => a + s.tokens.length, 0);
    return {
      json: {
        id,
        object: 'text_completion',
        created: Math.floor(Date.now() / 1000),
        model: this.servedName,
        choices,
        usage: {
          prompt_tokens: prompt.length,
          total_tokens: prompt.length + completion,
          completion_tokens: completion,
          prompt_tokens_details: cached > 0 ? { cached_tokens: cached } : null,
        },
      },
    };
  }

  private choice(s: GeneratedSequence, index: number, body: CompletionBody, temperature: number) {
    const useRaw = !this.processed && temperature !== 0 && temperature !== 1;
    if (useRaw && !s.rawLogprobs) throw new Error('the generator cannot report raw logprobs');
    const clamp = (l: number) => Math.max(l, -9999);
    const lps = (useRaw ? s.rawLogprobs! : s.logprobs).map(clamp);
    const asIds = body.return_tokens_as_token_ids === true;
    const tokenStrings = s.tokens.map((t) =>
      asIds ? `token_id:${t}` : this.generator.decode([t]),
    );
    let text = this.generator.decode(s.tokens);
    const stopString = s.finish === 'stop' && typeof s.matched === 'string';
    if (stopString && !body.include_stop_str_in_output)
      text = text.slice(0, text.length - (s.matched as string).length);
    let offset = 0;
    const textOffset = tokenStrings.map((t) => {
      const at = offset;
      offset += t.length;
      return at;
    });
    const eos = s.finish === 'stop' && s.matched === this.generator.eosTokenId;
    return {
      index,
      text,
      logprobs:
        body.logprobs === undefined || body.logprobs === null
          ? null
          : {
              text_offset: textOffset,
              token_logprobs: lps,
              tokens: tokenStrings,
              // The sampled token first, then the most likely ones (it may be among them).
              top_logprobs: tokenStrings.map((t, i) => {
                const row: Record<string, number> = { [t]: lps[i]! };
                const a = s.top?.[i];
                a?.ids.forEach((id, j) => {
                  const key = asIds ? `token_id:${id}` : this.generator.decode([id]);
                  row[key] ??= clamp(useRaw ? a.rawLogprobs![j]! : a.logprobs[j]!);
                });
                return row;
              }),
            },
      finish_reason: s.finish,
      stop_reason: s.finish === 'stop' && !eos ? (s.matched ?? null) : null,
      prompt_logprobs: null,
    };
  }

  private async collectiveRpc(body: { method?: unknown } | undefined): Promise<RouteAnswer> {
    if (body?.method !== 'reload_weights')
      return err(500, `worker has no method ${String(body?.method)}`);
    if (this.weightsAsleep) return err(500, 'weights are asleep; call /wake_up?tags=weights first');
    await this.loadWeights(this.modelPath, this.stats.weightLoads + 1);
    this.weightsDiscarded = false;
    this.changed();
    return { json: { results: [null] } };
  }

  private async arealUpdate(body: { model_path?: unknown } | undefined): Promise<RouteAnswer> {
    if (typeof body?.model_path !== 'string') return err(400, 'model_path is required');
    try {
      await this.loadWeights(body.model_path, this.stats.weightLoads + 1);
    } catch (e) {
      return { status: 400, json: { success: false, message: (e as Error).message } };
    }
    return { json: { success: true, message: 'Succeeded to update model weights.' } };
  }

  /** Whether generation would use weights that a level-2 sleep discarded and nothing reloaded. */
  get hasDiscardedWeights(): boolean {
    return this.weightsDiscarded;
  }
}

function err(status: number, message: string): RouteAnswer {
  return {
    status,
    json: {
      error: {
        message,
        type:
          status === 400
            ? 'BadRequestError'
            : status === 404
              ? 'NotFoundError'
              : 'InternalServerError',
        param: null,
        code: status,
      },
    },
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const a = parseFakeArgs(process.argv.slice(2));
  const generator = new DeterministicGenerator({
    vocabSize: a.vocabSize,
    tokenDelayMs: a.tokenDelayMs,
  });
  await runStandalone(
    new FakeVllmServer({
      port: a.port,
      generator,
      ...(a.modelPath ? { modelPath: a.modelPath } : {}),
      ...(a.extra.has('enable-lora') &&
      /^(1|true)$/i.test(process.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING ?? '')
        ? {
            lora: {
              maxLoaded: Number(a.extra.get('max-cpu-loras') ?? Infinity),
              maxRank: Number(a.extra.get('max-lora-rank') ?? 16),
            },
          }
        : {}),
    }),
  );
}
