/**
 * The vLLM proxy engine: speaks vLLM's OpenAI-compatible server (`POST /v1/completions` with a
 * token-id prompt, `logprobs: 0`, `return_tokens_as_token_ids: true`) plus its dev-mode routes
 * (`VLLM_SERVER_DEV_MODE=1`): `/pause`, `/resume`, `/sleep`, `/wake_up`, `/collective_rpc`.
 *
 * Alternatives (`gconfig.topLogprobs: k`) are asked with `logprobs: k` and read from
 * `logprobs.top_logprobs` (per position, `{"token_id:N": logprob}` with the sampled token and the
 * k most likely, so up to k + 1 entries; sorted here and cut to k). The server's `--max-logprobs`
 * (default 20) bounds k.
 *
 * Logprob convention: vLLM V1 reports logprobs before temperature by default
 * (`--logprobs-mode raw_logprobs`), which are not the behaviour logprobs the trainer needs unless
 * the temperature is 1. Start the server with `--logprobs-mode processed_logprobs` and set
 * `logprobsMode: 'processed_logprobs'` to sample at other temperatures; with the default the
 * engine refuses temperatures other than 1 (and greedy).
 *
 * LoRA (a server started with `--enable-lora --max-loras N --max-lora-rank R` and
 * `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`, see `loraServerArgs`): adapters are loaded with
 * `POST /v1/load_lora_adapter {lora_name, lora_path}` and unloaded with
 * `POST /v1/unload_lora_adapter {lora_name}` (a text line on success, `{"error": ...}` with 400 /
 * 404 otherwise), and a completion runs under one with `model: <name>`.
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
  type ResolvedGenerationConfig,
  type SampleOutput,
  type SampleTokens,
  type ServerCall,
} from '../http/remote-engine.ts';
import type { StopReason, TopLogprobs } from '../types.ts';
import { vllmWeightTransferRoutes } from './weight-transfer.ts';

/** How `updateWeights` makes a vLLM server load a checkpoint. */
export type VllmReload =
  /** Upstream dev mode: sleep level 2 → wake weights → `collective_rpc reload_weights` → wake KV cache. */
  | 'sleep-reload'
  /** Upstream dev mode, in place: `collective_rpc reload_weights` alone. */
  | 'collective-rpc'
  /** AReaL's server: `POST /areal_update_weights {model_path}`. */
  | 'areal'
  /** Any route: `POST path` with `body(modelPath, version)`. */
  | { path: string; body: (modelPath: string, version: number) => unknown };

/** Options of {@link VllmEngine}. */
export interface VllmEngineOptions extends RemoteEngineOptions {
  /** Sent as `model` (older vLLM versions require it; needed for LoRA adapters). */
  model?: string;
  /** The server's `--logprobs-mode`. @default 'raw_logprobs' */
  logprobsMode?: 'raw_logprobs' | 'processed_logprobs';
  /** Reload route for weight updates. @default 'sleep-reload' */
  reload?: VllmReload;
  /**
   * The directory the server was started with (`vllm serve <dir>`). `reload_weights` reloads from
   * it, so with the `sleep-reload` and `collective-rpc` routes an update must name this path.
   */
  servedModelPath?: string;
  /** `/sleep?level=` used by `sleep()`: 1 offloads weights to CPU, 2 discards them. @default 1 */
  sleepLevel?: 1 | 2;
  /** Extra request fields sent as is, e.g. `{ skip_special_tokens: false }`. @default {} */
  extraBody?: Record<string, unknown>;
}

interface VllmChoice {
  index?: number;
  finish_reason?: string | null;
  logprobs?: {
    tokens?: string[];
    token_logprobs?: Array<number | null>;
    top_logprobs?: Array<Record<string, number> | null>;
  } | null;
}

/** The request and response mapping for vLLM's OpenAI-compatible server. */
export function vllmProtocol(opts: VllmEngineOptions = { urls: [] }): EngineProtocol {
  const raw = (opts.logprobsMode ?? 'raw_logprobs') === 'raw_logprobs';
  const reload = opts.reload ?? 'sleep-reload';
  return {
    kind: 'vllm',
    checkConfig(g) {
      requireTemperedOrUnitTemperature(
        raw,
        g.temperature,
        g.greedy,
        "start vLLM with --logprobs-mode processed_logprobs and set logprobsMode: 'processed_logprobs'",
      );
    },
    generateRequest(inputIds, g, n, stream, adapter) {
      // Under an adapter, `model` names it (vLLM serves each adapter as a model).
      const o = adapter === undefined ? opts : { ...opts, model: adapter };
      return { path: '/v1/completions', body: completionBody(inputIds, g, n, o, stream) };
    },
    streamReader(n, url, top) {
      // Each chunk's choices carry their new tokens only (OpenAI completion chunks); the one
      // that ends a choice has its finish_reason.
      const outs = streamedSamples<StopReason>(n, top);
      return {
        read(json) {
          const choices = (json as { choices?: VllmChoice[] } | null)?.choices;
          expectShape(Array.isArray(choices), url, 'a streamed chunk has no choices');
          const told = [];
          for (const c of choices) {
            const i = c.index ?? 0;
            expectShape(Number.isInteger(i) && i >= 0 && i < n, url, `choice ${i} of ${n}`);
            const finished = c.finish_reason !== null && c.finish_reason !== undefined;
            const got = c.logprobs || !finished ? choiceTokens(c, url, top) : noTokens(top);
            told.push(...outs.add(i, got, finished ? finishOf(c) : undefined));
          }
          return told;
        },
        end() {
          return outs
            .end(url, 'the stream ended before every choice finished')
            .map((got) => (got.finish === 'abort' ? { ...got, abortMessage } : got));
        },
      };
    },
    parseGenerate(json, n, url, top) {
      const choices = (json as { choices?: VllmChoice[] } | null)?.choices;
      expectShape(Array.isArray(choices) && choices.length === n, url, `expected ${n} choices`);
      return [...choices]
        .sort((a, b) => (a.index ?? 0) - (b.index ?? 0))
        .map((c) => parseChoice(c, url, top));
    },
    // sleep level 2 discards the weights, and reload_weights may fail half loaded.
    atomicReload: false,
    distributed: vllmWeightTransferRoutes,
    pauseServer: (call) => callOptional(call, '/pause?mode=abort'),
    async continueServer(call) {
      await callOptional(call, '/resume');
    },
    validateUpdate(path) {
      if (typeof reload === 'object' || reload === 'areal' || opts.servedModelPath === undefined)
        return;
      if (stripSlash(opts.servedModelPath) !== stripSlash(path)) {
        throw new EngineError(
          'CONFIG',
          `vLLM reload_weights reloads from the served model directory ${opts.servedModelPath}, not ${path}: write the checkpoint there or use reload 'areal' or a custom route`,
        );
      }
    },
    async reloadWeights(call, path, version) {
      if (typeof reload === 'object')
        return void (await call(reload.path, reload.body(path, version)));
      if (reload === 'areal')
        return void (await call('/areal_update_weights', { model_path: path }));
      if (reload === 'sleep-reload') {
        await call('/sleep?level=2', {});
        await call('/wake_up?tags=weights', {});
        await rpc(call, 'reload_weights');
        await call('/wake_up?tags=kv_cache', {});
      } else {
        await rpc(call, 'reload_weights');
      }
    },
    async loadAdapter(call, name, path) {
      await call('/v1/load_lora_adapter', { lora_name: name, lora_path: path });
    },
    async unloadAdapter(call, name) {
      await call('/v1/unload_lora_adapter', { lora_name: name });
    },
    async sleep(call) {
      await call(`/sleep?level=${opts.sleepLevel ?? 1}`, {});
    },
    async wakeUp(call) {
      await call('/wake_up', {});
    },
  };
}

/** `GenerationConfig` → the `/v1/completions` body, field by field. */
export function completionBody(
  inputIds: number[],
  g: ResolvedGenerationConfig,
  n: number,
  opts: Pick<VllmEngineOptions, 'model' | 'extraBody'> = {},
  stream = false,
): Record<string, unknown> {
  const b: Record<string, unknown> = {
    prompt: inputIds,
    max_tokens: g.maxNewTokens,
    min_tokens: g.minNewTokens,
    ...sharedSamplingFields(g),
    logprobs: g.topLogprobs,
    return_tokens_as_token_ids: true,
    n,
    stream,
    ...opts.extraBody,
  };
  if (opts.model !== undefined) b.model = opts.model;
  if (g.stop.length > 0) b.stop = g.stop;
  if (g.seed !== undefined) b.seed = g.seed;
  return b;
}

async function rpc(call: ServerCall, method: string): Promise<void> {
  await call('/collective_rpc', { method });
}

function stripSlash(p: string): string {
  return p.replace(/\/+$/, '');
}

const abortMessage = 'aborted by the server';

function parseChoice(c: VllmChoice, url: string, top: number): SampleOutput {
  const got = c.logprobs || c.finish_reason !== 'abort' ? choiceTokens(c, url, top) : noTokens(top);
  const finish = finishOf(c);
  return finish === 'abort' ? { ...got, finish, abortMessage } : { ...got, finish };
}

function noTokens(top: number): SampleTokens {
  return { tokens: [], logprobs: [], ...(top > 0 ? { top: [] } : {}) };
}

function finishOf(c: VllmChoice): StopReason {
  if (c.finish_reason === 'length') return 'length';
  if (c.finish_reason === 'abort') return 'abort';
  if (c.finish_reason === null || c.finish_reason === undefined) return 'length';
  return 'stop';
}

/**
 * A choice's tokens and logprobs, from `logprobs` with `token_id:N` tokens, and with `top` their
 * `top` most likely alternatives from `logprobs.top_logprobs`.
 */
function choiceTokens(c: VllmChoice, url: string, top: number): SampleTokens {
  const lp = c.logprobs;
  const tokens: number[] = [];
  const logprobs: number[] = [];
  if (lp) {
    expectShape(
      Array.isArray(lp.tokens) &&
        Array.isArray(lp.token_logprobs) &&
        lp.tokens.length === lp.token_logprobs.length,
      url,
      'logprobs.tokens and logprobs.token_logprobs differ',
    );
    for (let i = 0; i < lp.tokens.length; i++) {
      const t = lp.tokens[i]!;
      const m = /^token_id:(-?\d+)$/.exec(t);
      expectShape(
        m,
        url,
        `token ${JSON.stringify(t)} is not token_id:N (was return_tokens_as_token_ids honoured?)`,
      );
      const l = lp.token_logprobs[i];
      expectShape(typeof l === 'number', url, `token_logprobs[${i}] is ${String(l)}`);
      tokens.push(Number(m[1]));
      logprobs.push(l);
    }
  } else {
    expectShape(false, url, 'choice has no logprobs (was logprobs: 0 sent?)');
  }
  if (top === 0) return { tokens, logprobs };
  const rows = lp.top_logprobs;
  expectShape(
    Array.isArray(rows) && rows.length === tokens.length,
    url,
    'logprobs.top_logprobs is missing or not one entry per token',
  );
  return { tokens, logprobs, top: rows.map((row) => alternatives(row, top, url)) };
}

/** One position's `{"token_id:N": logprob}` (null: none) as the `k` most likely, most likely first. */
function alternatives(row: unknown, k: number, url: string): TopLogprobs {
  if (row === null) return { ids: [], logprobs: [] };
  expectShape(typeof row === 'object', url, `bad top_logprobs entry ${JSON.stringify(row)}`);
  const pairs = Object.entries(row as Record<string, unknown>).map(([t, l]) => {
    const m = /^token_id:(-?\d+)$/.exec(t);
    expectShape(m && typeof l === 'number', url, `bad top_logprobs entry ${JSON.stringify(row)}`);
    return [Number(m[1]), l] as const;
  });
  return mostLikelyFirst(pairs, k);
}

/**
 * An {@link InferenceEngine} backed by one or more vLLM OpenAI-compatible servers.
 *
 * @example
 * const engine = new VllmEngine({ urls: ['http://10.0.0.5:8000'], logprobsMode: 'processed_logprobs' });
 * const r = await engine.generate({ inputIds: [1, 2, 3], gconfig: { maxNewTokens: 64, temperature: 0.7 } });
 */
export class VllmEngine extends RemoteEngine {
  constructor(options: VllmEngineOptions) {
    super(vllmProtocol(options), options);
  }
}
