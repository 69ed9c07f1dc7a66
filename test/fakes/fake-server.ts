/**
 * What the fake SGLang and vLLM servers share: a loopback HTTP server with a route table, the
 * requests in flight (abortable), a pause gate, a prefix cache estimate, fault injection (health
 * failing or hanging, slow answers, and per route: an error status with `Retry-After`, a
 * connection dropped mid-answer, cut-off JSON, no answer, a crash), LoRA adapters loaded and
 * unloaded at run time (read from PEFT directories, applied by the generator, counted in use per
 * request) and events tests can wait on.
 *
 * @module
 */
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

import { readLoraAdapter, type LoraAdapter } from '../../model/lora-adapter.ts';
import {
  DeterministicGenerator,
  type GeneratedSequence,
  type SamplingRequest,
  type TokenGenerator,
} from './token-generator.ts';

/** What one sample of a generation request asks for, as both servers' bodies say it. */
export type SampleParams = Omit<SamplingRequest, 'signal' | 'hold' | 'onToken' | 'seed'> & {
  seed?: number;
};

/** A LoRA adapter a fake server loaded. */
export interface LoadedAdapter {
  name: string;
  path: string;
  lora: LoraAdapter;
  /** Requests generating under it now. */
  inUse: number;
}

/** The sampling fields SGLang's `sampling_params` and vLLM's completion body name alike. */
export interface WireSamplingFields {
  temperature?: number;
  top_p?: number;
  top_k?: number;
  stop?: string | string[];
  stop_token_ids?: number[];
  ignore_eos?: boolean;
  n?: number;
}

/**
 * A request's sampling fields with the servers' defaults, plus what each server names its own
 * way (prompt, token budgets, seed).
 */
export function sampleParams(
  w: WireSamplingFields,
  own: Pick<
    SampleParams,
    'inputIds' | 'maxNewTokens' | 'minNewTokens' | 'seed' | 'topLogprobs' | 'adapter'
  >,
): SampleParams {
  return {
    temperature: w.temperature ?? 1,
    topP: w.top_p ?? 1,
    topK: w.top_k ?? -1,
    stopTokenIds: w.stop_token_ids ?? [],
    stop: typeof w.stop === 'string' ? [w.stop] : (w.stop ?? []),
    ignoreEos: w.ignore_eos ?? false,
    ...own,
  };
}

/** Tokens `[from, to)` of a sample, with everything reported per token. */
export function sliceSequence(
  s: Readonly<GeneratedSequence>,
  from: number,
  to?: number,
): GeneratedSequence {
  return {
    ...s,
    tokens: s.tokens.slice(from, to),
    logprobs: s.logprobs.slice(from, to),
    ...(s.rawLogprobs ? { rawLogprobs: s.rawLogprobs.slice(from, to) } : {}),
    ...(s.top ? { top: s.top.slice(from, to) } : {}),
  };
}

/** Options every fake server takes. */
export interface FakeServerOptions {
  /** @default 0 (an ephemeral port) */
  port?: number;
  /** @default '127.0.0.1' */
  host?: string;
  /** @default a {@link DeterministicGenerator} */
  generator?: TokenGenerator;
  /** The served model directory (`--model-path` / `vllm serve <dir>`). @default '/fake/model' */
  modelPath?: string;
  /** Prompt + output cap. @default 4096 */
  contextLength?: number;
  /**
   * LoRA serving, as a server started with `--enable-lora` (vLLM also with
   * `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`): the load/unload routes answer and a request may
   * name a loaded adapter. `maxLoaded`: adapters held at once (SGLang `--max-loaded-loras`
   * refuses more); `maxRank`: `--max-lora-rank`. Unset: LoRA is off.
   */
  lora?: { maxLoaded?: number; maxRank?: number };
}

/** A parsed request handed to a route. */
export interface RouteRequest {
  body: unknown;
  query: URLSearchParams;
}

/**
 * What a route answers: JSON, text, nothing (200 with an empty body), or server-sent events:
 * `sse` runs after the 200 went out and sends each event's data (JSON, or a string as is).
 */
export type RouteAnswer =
  | {
      status?: number;
      json?: unknown;
      text?: string;
      sse?: (send: (data: unknown) => void) => Promise<void>;
    }
  | undefined;

/** A failure a fake answers one request with, as a real server or the network between might. */
export type Fault =
  /** Answer with this status, the server's error body and, when given, `Retry-After`. */
  | { kind: 'status'; status: number; retryAfter?: string }
  /** Send the headers and part of the body, then drop the connection. */
  | { kind: 'reset' }
  /** Answer 200 with a body that is cut-off JSON. */
  | { kind: 'malformed' }
  /** Never answer; the connection stays open. */
  | { kind: 'hang' }
  /** Crash: stop listening and drop every connection, this one included. */
  | { kind: 'die' };

/** How `/health` behaves. */
export type HealthMode = 'ok' | 'fail' | 'hang';

/** A request in flight: aborting its controller ends its generation with `abort`. */
export interface Running {
  controller: AbortController;
  /** Set when the abort happened before the first token. */
  started: boolean;
}

/** Counters tests read. */
export interface FakeStats {
  generateRequests: number;
  tokensGenerated: number;
  running: number;
  weightLoads: number;
  healthChecks: number;
  /** Requests answered with an injected {@link Fault}. */
  faults: number;
  adapterLoads: number;
  adapterUnloads: number;
  /** The most adapters loaded at once so far. */
  maxLoadedAdapters: number;
}

/** The base of the fake servers; subclasses register routes. */
export abstract class FakeServer extends EventEmitter {
  readonly generator: TokenGenerator;
  readonly modelPath: string;
  readonly contextLength: number;
  readonly stats: FakeStats = {
    generateRequests: 0,
    tokensGenerated: 0,
    running: 0,
    weightLoads: 0,
    healthChecks: 0,
    faults: 0,
    adapterLoads: 0,
    adapterUnloads: 0,
    maxLoadedAdapters: 0,
  };
  /** LoRA adapters loaded now, by name, in load order. */
  readonly adapters = new Map<string, LoadedAdapter>();
  protected readonly lora: { maxLoaded: number; maxRank: number } | undefined;
  /** Bodies of the last generation requests, newest last (tests check the field mapping). */
  readonly generateBodies: unknown[] = [];
  healthMode: HealthMode = 'ok';
  /** Added before every generation answer. */
  responseDelayMs = 0;
  /** The next this-many generation requests fail with 503. */
  failNextGenerates = 0;
  /** The weight version as a string (`weight_version`). */
  weightVersion = 'default';
  protected readonly running = new Set<Running>();
  protected paused = false;
  protected asleep = false;
  private readonly unpauseWaiters = new Set<() => void>();
  private readonly faults = new Map<string, Fault[]>();
  private readonly routes = new Map<
    string,
    (r: RouteRequest) => Promise<RouteAnswer> | RouteAnswer
  >();
  private readonly recentPrompts: number[][] = [];
  private readonly server: Server;
  private portNumber = 0;
  private readonly host: string;
  private readonly requestedPort: number;

  constructor(opts: FakeServerOptions) {
    super();
    this.generator = opts.generator ?? new DeterministicGenerator();
    this.modelPath = opts.modelPath ?? '/fake/model';
    this.contextLength = opts.contextLength ?? 4096;
    this.lora = opts.lora && {
      maxLoaded: opts.lora.maxLoaded ?? Infinity,
      maxRank: opts.lora.maxRank ?? 16,
    };
    this.host = opts.host ?? '127.0.0.1';
    this.requestedPort = opts.port ?? 0;
    this.server = createServer((req, res) => void this.dispatch(req, res));
    this.route('GET', '/health', () => this.health());
  }

  get port(): number {
    return this.portNumber;
  }

  get url(): string {
    return `http://${this.host}:${this.portNumber}`;
  }

  /** Starts listening; resolves with the server. */
  async listen(): Promise<this> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.requestedPort, this.host, () => resolve());
    });
    this.portNumber = (this.server.address() as AddressInfo).port;
    return this;
  }

  /** Stops listening and drops every connection, hanging ones included. */
  async close(): Promise<void> {
    for (const r of this.running) r.controller.abort();
    this.paused = false;
    for (const w of this.unpauseWaiters) w();
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  /** Resolves once `pred()` holds, re-checked on every change; rejects after `timeoutMs`. */
  waitFor(pred: () => boolean, timeoutMs = 10_000): Promise<void> {
    if (pred()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (!pred()) return;
        clearTimeout(timer);
        this.off('change', check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.off('change', check);
        reject(new Error(`condition not reached in ${timeoutMs} ms`));
      }, timeoutMs);
      this.on('change', check);
    });
  }

  /** The next `times` requests to `path` (any method) get `fault` instead of their answer. */
  injectFault(path: string, fault: Fault, times = 1): void {
    const queue = this.faults.get(path) ?? [];
    for (let i = 0; i < times; i++) queue.push(fault);
    this.faults.set(path, queue);
  }

  protected route(
    method: 'GET' | 'POST',
    path: string,
    fn: (r: RouteRequest) => Promise<RouteAnswer> | RouteAnswer,
  ): void {
    this.routes.set(`${method} ${path}`, fn);
  }

  protected changed(): void {
    this.emit('change');
  }

  /** Holds a caller while the server is paused (an aborted request is let go at once). */
  protected async whilePaused(signal?: AbortSignal): Promise<void> {
    while (this.paused && !signal?.aborted)
      await new Promise<void>((r) => this.unpauseWaiters.add(r));
  }

  protected setPaused(paused: boolean): void {
    this.paused = paused;
    if (!paused) this.wakeWaiters();
    this.changed();
  }

  /** Aborts every running request; returns how many there were. */
  protected abortAll(): number {
    const n = this.running.size;
    for (const r of this.running) r.controller.abort();
    this.wakeWaiters();
    return n;
  }

  private wakeWaiters(): void {
    const ws = [...this.unpauseWaiters];
    this.unpauseWaiters.clear();
    for (const w of ws) w();
  }

  /** Longest prefix shared with a recent prompt: what a radix cache would have reused. */
  protected cachedTokens(prompt: number[]): number {
    let best = 0;
    for (const p of this.recentPrompts) {
      let i = 0;
      while (i < p.length && i < prompt.length && p[i] === prompt[i]) i++;
      best = Math.max(best, i);
    }
    this.recentPrompts.push(prompt);
    if (this.recentPrompts.length > 256) this.recentPrompts.shift();
    return best;
  }

  /** Runs `n` samples of one request; sample `i` is seeded `seed + i` when a seed is given. */
  protected sampleAll(
    n: number,
    p: SampleParams,
    onToken?: (sample: number, soFar: Readonly<GeneratedSequence>) => void,
  ): Promise<GeneratedSequence[]> {
    return Promise.all(
      Array.from({ length: n }, (_, i) => {
        const { seed, ...rest } = p;
        return this.runSample(
          seed === undefined ? rest : { ...rest, seed: seed + i },
          onToken && ((s) => onToken(i, s)),
        );
      }),
    );
  }

  /**
   * Loads the PEFT adapter directory `path` under `name`; returns why it cannot (the real
   * servers' reasons: LoRA off, the name taken, too many loaded, rank over `--max-lora-rank`, not
   * an adapter directory), or undefined once loaded.
   */
  protected async loadAdapter(name: string, path: string): Promise<string | undefined> {
    if (!this.lora) return 'LoRA is not enabled. Please set `--enable-lora` to enable LoRA.';
    if (!name || !path) return "Both 'lora_name' and 'lora_path' must be provided.";
    if (this.adapters.has(name)) return `The lora adapter '${name}' has already been loaded.`;
    if (this.adapters.size >= this.lora.maxLoaded)
      return `Maximum number of loaded LoRA adapters (${this.lora.maxLoaded}) reached. Unload some adapters first.`;
    let lora: LoraAdapter;
    try {
      lora = readLoraAdapter(path);
    } catch (e) {
      return (e as Error).message;
    }
    if (lora.config.r > this.lora.maxRank)
      return `LoRA rank ${lora.config.r} is greater than max_lora_rank ${this.lora.maxRank}.`;
    await this.generator.loadAdapter?.(name, lora);
    this.adapters.set(name, { name, path, lora, inUse: 0 });
    this.stats.adapterLoads += 1;
    this.stats.maxLoadedAdapters = Math.max(this.stats.maxLoadedAdapters, this.adapters.size);
    this.changed();
    return undefined;
  }

  /**
   * Unloads the adapter `name`: no new request may name it; requests under it keep it until they
   * end (with `waitForRequests`, as SGLang does, the answer waits for them). Returns why it
   * cannot, or undefined.
   */
  protected async unloadAdapter(
    name: string,
    waitForRequests: boolean,
  ): Promise<string | undefined> {
    const a = this.adapters.get(name);
    if (!a) return `The lora adapter '${name}' cannot be found.`;
    this.adapters.delete(name);
    this.changed();
    const free = this.waitFor(() => a.inUse === 0, 600_000).then(async () => {
      await this.generator.unloadAdapter?.(name);
      this.stats.adapterUnloads += 1;
      this.changed();
    });
    if (waitForRequests) await free;
    else void free.catch(() => undefined);
    return undefined;
  }

  /** Runs one sample under the server's abort and pause rules. */
  private async runSample(
    req: Omit<SamplingRequest, 'signal' | 'hold' | 'onToken'>,
    onToken?: (soFar: Readonly<GeneratedSequence>) => void,
  ): Promise<GeneratedSequence> {
    const running: Running = { controller: new AbortController(), started: false };
    const adapter = req.adapter && this.adapters.get(req.adapter.name);
    if (adapter) adapter.inUse += 1;
    this.running.add(running);
    this.stats.running = this.running.size;
    this.changed();
    try {
      return await this.generator.generate({
        ...req,
        signal: running.controller.signal,
        hold: () => this.whilePaused(running.controller.signal),
        onToken: (soFar) => {
          running.started = true;
          this.stats.tokensGenerated += 1;
          onToken?.(soFar);
          this.changed();
        },
      });
    } finally {
      if (adapter) adapter.inUse -= 1;
      this.running.delete(running);
      this.stats.running = this.running.size;
      this.changed();
    }
  }

  /**
   * Holds new requests; in `abort` mode also ends every running one now with its partial output
   * (SGLang `/pause_generation`, vLLM `/pause`).
   */
  protected async pauseGeneration(mode: string): Promise<void> {
    this.setPaused(true);
    if (mode === 'abort') {
      this.abortAll();
      await this.generator.abortAll?.();
    }
  }

  /** Lets held requests go on (SGLang `/continue_generation`, vLLM `/resume`). */
  protected async resumeGeneration(): Promise<void> {
    this.setPaused(false);
    await this.generator.resumeAll?.();
  }

  /** Resolves once no request is running. */
  protected whenIdle(): Promise<void> {
    return this.waitFor(() => this.running.size === 0, 600_000);
  }

  /** Waits for running requests to end, then loads the checkpoint at `path` (throws if it cannot). */
  protected async loadWeights(path: string, version: number): Promise<void> {
    await this.whenIdle();
    await this.generator.loadWeights(path, version);
    this.stats.weightLoads += 1;
    this.changed();
  }

  /** Counts a generation request and applies the injected faults; an answer means "send this instead". */
  protected async beforeGenerate(body: unknown): Promise<RouteAnswer> {
    this.stats.generateRequests += 1;
    this.generateBodies.push(body);
    if (this.generateBodies.length > 100) this.generateBodies.shift();
    this.changed();
    if (this.failNextGenerates > 0) {
      this.failNextGenerates -= 1;
      return { status: 503, json: { object: 'error', message: 'injected failure', code: 503 } };
    }
    return undefined;
  }

  protected async delayAnswer(): Promise<void> {
    if (this.responseDelayMs > 0) await new Promise((r) => setTimeout(r, this.responseDelayMs));
  }

  private health(): RouteAnswer | Promise<RouteAnswer> {
    this.stats.healthChecks += 1;
    this.changed();
    if (this.healthMode === 'fail') return { status: 503, text: '' };
    if (this.healthMode === 'hang') return new Promise<RouteAnswer>(() => undefined);
    return undefined;
  }

  private async dispatch(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://fake');
    const fn = this.routes.get(`${req.method} ${url.pathname}`);
    let answer: RouteAnswer;
    try {
      const raw = await readBody(req);
      const fault = this.faults.get(url.pathname)?.shift();
      if (fault) return this.fail(fault, res);
      if (!fn) answer = { status: 404, json: { detail: 'Not Found' } };
      else {
        let body: unknown = undefined;
        if (raw.length > 0) {
          try {
            body = JSON.parse(raw);
          } catch {
            answer = {
              status: 400,
              json: { object: 'error', message: 'body is not JSON', code: 400 },
            };
          }
        }
        answer ??= await fn({ body, query: url.searchParams });
      }
    } catch (e) {
      answer = { status: 500, json: { object: 'error', message: (e as Error).message, code: 500 } };
    }
    if (res.destroyed) return;
    if (answer?.sse) {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const send = (d: unknown): void => {
        if (!res.destroyed) res.write(`data: ${typeof d === 'string' ? d : JSON.stringify(d)}\n\n`);
      };
      try {
        await answer.sse(send);
      } catch (e) {
        // After the 200, a failure can only be told as an event (what SGLang and vLLM do).
        send({ error: { message: (e as Error).message, code: 500 } });
      }
      send('[DONE]');
      res.end();
      return;
    }
    res.statusCode = answer?.status ?? 200;
    if (answer?.json !== undefined) {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(answer.json));
    } else res.end(answer?.text ?? '');
  }

  private fail(fault: Fault, res: ServerResponse): void {
    this.stats.faults += 1;
    this.changed();
    const body = '{"text":"the answer was cut off here","meta_info":{"finish_reason":';
    switch (fault.kind) {
      case 'status':
        res.statusCode = fault.status;
        res.setHeader('content-type', 'application/json');
        if (fault.retryAfter !== undefined) res.setHeader('retry-after', fault.retryAfter);
        res.end(
          JSON.stringify({ object: 'error', message: 'injected failure', code: fault.status }),
        );
        return;
      case 'reset':
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': body.length * 2,
        });
        res.write(body, () => res.destroy());
        return;
      case 'malformed':
        res.setHeader('content-type', 'application/json');
        res.end(body);
        return;
      case 'hang':
        return;
      case 'die':
        void this.close();
        return;
    }
  }
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** Parses `--port N --model-path P ...` style arguments of a standalone fake server. */
export function parseFakeArgs(argv: string[]): {
  port: number;
  modelPath?: string;
  tokenDelayMs: number;
  vocabSize: number;
  extra: Map<string, string>;
} {
  const m = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a.startsWith('--')) {
      const eq = a.indexOf('=');
      if (eq > 0) m.set(a.slice(2, eq), a.slice(eq + 1));
      else
        m.set(
          a.slice(2),
          argv[i + 1] !== undefined && !argv[i + 1]!.startsWith('--') ? argv[++i]! : 'true',
        );
    }
  }
  const modelPath = m.get('model-path') ?? m.get('model');
  return {
    port: Number(m.get('port') ?? 0),
    ...(modelPath === undefined ? {} : { modelPath }),
    tokenDelayMs: Number(m.get('token-delay-ms') ?? 0),
    vocabSize: Number(m.get('vocab-size') ?? 64),
    extra: m,
  };
}

/** Runs a fake server as a process: prints `listening on <url>`, exits cleanly on SIGTERM/SIGINT. */
export async function runStandalone(server: FakeServer): Promise<void> {
  await server.listen();
  const gpus = process.env.CUDA_VISIBLE_DEVICES;
  if (gpus !== undefined) process.stdout.write(`CUDA_VISIBLE_DEVICES=${gpus}\n`);
  process.stdout.write(`listening on ${server.url}\n`);
  const stop = (): void => {
    void server.close().then(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}
