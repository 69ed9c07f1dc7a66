/**
 * The engine logic shared by the SGLang and vLLM proxies: an {@link InferenceEngine} that sends
 * token ids to one or more inference servers over HTTP. What differs between servers (request
 * and response shapes, pause, reload, sleep routes) lives in an {@link EngineProtocol}.
 *
 * Behaviour, following AReaL's remote engine:
 * - a sample whose request comes back aborted by a weight update or by the server is re-sent as
 *   prompt + partial output with the remaining token budget, until it stops or hits its length;
 *   every token is tagged with the policy version the server held when the segment was sent;
 * - `pause({ mode: 'abort' })` aborts in-flight requests server-side and they return `abort`;
 * - requests are routed to the least loaded server, and every request with the same `rid` (an
 *   episode's turns) to the same server while it is up;
 * - transient failures are retried with exponential backoff; a request on a server that goes
 *   down is re-sent to another one;
 * - a request with `onTokens` is streamed by the server and told per event; one that fails
 *   after tokens came continues from them like an interrupted sample, never from scratch;
 * - a LoRA policy's update loads the adapter under a new name per version on every server
 *   without pausing them; later segments name it, segments in flight keep the adapter they were
 *   sent with, and the oldest adapter beyond `loraSlots` is unloaded (its segments still in
 *   flight are cut and continue on the newest, as interrupted samples).
 *
 * Longer than most files on purpose: these behaviours share one piece of state (the servers,
 * their load, the in-flight requests and the version each holds), and each of them — routing,
 * continuation, pause, weight update — reads and changes it; split by behaviour, every file
 * would reach into the same private fields.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';

import type {
  GenerateRequest,
  GenerateResult,
  GenerationConfig,
  InferenceEngine,
  PauseOptions,
  StopReason,
  TopLogprobs,
  WeightUpdate,
} from '../types.ts';
import { writeLoraAdapter, type LoraAdapter } from '../../model/lora-adapter.ts';
import type { NamedTensors } from '../../model/tensors.ts';
import { backoffDelayMs, delay } from './backoff.ts';
import {
  type DistributedRoutes,
  type DistributedSyncOptions,
  DistributedWeights,
} from './distributed-weights.ts';
import { EngineError, isEngineError } from './errors.ts';
import { RequestGate } from './gate.ts';
import { httpCall, httpStream } from './http-call.ts';
import { ServerPool, type ServerEvent, type ServerStatus } from './server-pool.ts';

/** A generation config with every field decided. */
export interface ResolvedGenerationConfig {
  maxNewTokens: number;
  minNewTokens: number;
  temperature: number;
  topP: number;
  topK: number;
  greedy: boolean;
  stopTokenIds: number[];
  stop: string[];
  n: number;
  seed: number | undefined;
  /** Alternatives asked at each position; 0: none. */
  topLogprobs: number;
}

/** Tokens of one sample with their logprobs, and their alternatives when asked. */
export interface SampleTokens {
  tokens: number[];
  logprobs: number[];
  /** With `topLogprobs`: one entry per token, most likely first. */
  top?: TopLogprobs[];
}

/** One sample as a server returned it. */
export interface SampleOutput extends SampleTokens {
  finish: StopReason;
  /** The server's message when `finish` is `abort`. */
  abortMessage?: string;
}

/** New tokens of one sample in a streamed answer. */
export interface StreamedTokens extends SampleTokens {
  sample: number;
}

/** Tokens `[from, to)` of `t`, alternatives included when it has them. */
export function sliceTokens(t: SampleTokens, from: number, to?: number): SampleTokens {
  return {
    tokens: t.tokens.slice(from, to),
    logprobs: t.logprobs.slice(from, to),
    ...(t.top ? { top: t.top.slice(from, to) } : {}),
  };
}

/** The state of one streamed generation answer; see {@link EngineProtocol.streamReader}. */
export interface StreamReader {
  /** Takes one event's parsed `data`; returns the tokens it adds. */
  read(json: unknown): StreamedTokens[];
  /** Every sample as a whole once the stream ended; `EngineError('PROTOCOL')` if one never finished. */
  end(): SampleOutput[];
}

/** Calls a route on one server: JSON body → JSON answer (`GET` when `body` is undefined). */
export type ServerCall = (
  path: string,
  body?: unknown,
  opts?: { method?: 'GET' | 'POST' },
) => Promise<unknown>;

/** What one kind of server speaks. */
export interface EngineProtocol {
  readonly kind: string;
  /** Throws `EngineError('CONFIG')` when the server's logprobs would not mean what the contract says. */
  checkConfig(g: ResolvedGenerationConfig): void;
  /**
   * The generation request for `n` samples of `inputIds` with at most `g.maxNewTokens` new
   * tokens; with `stream`, one the server answers as server-sent events; with `adapter`, under
   * the LoRA adapter the server loaded by that name.
   */
  generateRequest(
    inputIds: number[],
    g: ResolvedGenerationConfig,
    n: number,
    stream: boolean,
    adapter?: string,
  ): { path: string; body: unknown };
  /** The `n` samples in a generation answer, in order, with `top` alternatives per token when asked. */
  parseGenerate(json: unknown, n: number, url: string, top: number): SampleOutput[];
  /** Reads one streamed generation answer of `n` samples, event by event. */
  streamReader(n: number, url: string, top: number): StreamReader;
  /** Aborts in-flight requests and holds new ones; `false` when the server has no such route. */
  pauseServer(call: ServerCall): Promise<boolean>;
  continueServer(call: ServerCall): Promise<void>;
  /** Throws `EngineError('CONFIG')`, before anything is paused, when `path` cannot be loaded this way. */
  validateUpdate?(path: string): void;
  /** Loads the HF checkpoint at `path` and tags it `version`. */
  reloadWeights(call: ServerCall, path: string, version: number): Promise<void>;
  /**
   * Whether a failed `reloadWeights` leaves the server serving its old weights (SGLang rolls
   * back). When not, a server whose reload failed is out of service until a reload succeeds.
   */
  readonly atomicReload: boolean;
  /** The routes that receive full weights in memory over a c10d group (`distributed-weights.ts`). */
  readonly distributed?: DistributedRoutes;
  /** Loads the PEFT adapter directory `path` under `name` (the server's run-time LoRA route). */
  loadAdapter?(call: ServerCall, name: string, path: string): Promise<void>;
  /** Unloads the adapter `name`. */
  unloadAdapter?(call: ServerCall, name: string): Promise<void>;
  sleep(call: ServerCall): Promise<void>;
  wakeUp(call: ServerCall): Promise<void>;
}

/** Options shared by the HTTP engines. */
export interface RemoteEngineOptions {
  /** Server base URLs, e.g. `['http://10.0.0.5:30000']`. */
  urls: string[];
  /** Limit on one generation request. @default 3_600_000 */
  requestTimeoutMs?: number;
  /** Limit on control requests (pause, weight reload, sleep). @default 600_000 */
  controlTimeoutMs?: number;
  /**
   * Limit on a whole weight update (pause, drain, reload on every server). A server that has not
   * reloaded by then is taken out of routing (it rejoins through its health probes, reloaded);
   * when none has, the update fails with an `EngineError('TIMEOUT')` naming the server and the
   * phase. @default 600_000
   */
  weightSyncTimeoutMs?: number;
  /** Retries of a failed request (timeouts, connection errors, 5xx, 429). @default 3 */
  maxRetries?: number;
  /** First retry delay; doubles each retry. @default 250 */
  retryBaseDelayMs?: number;
  /** Cap on a retry delay. @default 5000 */
  retryMaxDelayMs?: number;
  /**
   * A 429 or 503 with `Retry-After` waits at least what the server asks before the retry, up to
   * this long. @default 60_000
   */
  retryAfterMaxMs?: number;
  /** How long a request waits for some server to be up before failing. @default 30_000 */
  noServerWaitMs?: number;
  /** Health route. @default '/health' */
  healthPath?: string;
  /** Time between health probes. @default 5000 */
  healthIntervalMs?: number;
  /** A health probe slower than this fails. @default 5000 */
  healthTimeoutMs?: number;
  /** Consecutive failures that mark a server down. @default 2 */
  healthFailureThreshold?: number;
  /**
   * Writes in-memory tensors as an HF checkpoint the servers can read and returns its path; needed
   * for `updateWeights({ kind: 'tensors' })`. Without it only `{ kind: 'disk' }` updates work.
   */
  writeCheckpoint?: (tensors: NamedTensors, version: number) => Promise<string>;
  /**
   * Full weights in memory: `updateWeights({ kind: 'tensors' })` broadcasts them from this
   * process over a Gloo or NCCL group the servers join (`distributed-weights.ts`) instead of
   * writing a checkpoint. A server that rejoins later is reloaded from `writeCheckpoint`'s
   * directory. @default reloads from disk
   */
  weightSync?: DistributedSyncOptions;
  /** Told when a server goes down (its requests are re-sent elsewhere) or comes back. */
  onServerEvent?: (e: ServerEvent) => void;
  /**
   * Where `updateWeights({ kind: 'lora' })` writes each version's adapter as a PEFT directory
   * (`<loraDir>/rtjob-v<version>`), which the servers load by path: a filesystem they all see.
   * Needed for LoRA updates.
   */
  loraDir?: string;
  /**
   * LoRA adapters a server holds at once: the run's maximum staleness + 2 (segments in flight may
   * be that many versions behind and keep their adapter until they end, and the new adapter loads
   * before the oldest unloads). Start the servers with room for as many (`loraServerArgs`).
   * @default 2
   */
  loraSlots?: number;
  /**
   * The most alternatives per token a request may ask (`gconfig.topLogprobs`); vLLM refuses
   * more than its `--max-logprobs` (default 20). @default 20
   */
  maxTopLogprobs?: number;
}

/** Defaults of {@link RemoteEngineOptions}. */
export const remoteEngineDefaults = {
  requestTimeoutMs: 3_600_000,
  controlTimeoutMs: 600_000,
  weightSyncTimeoutMs: 600_000,
  maxRetries: 3,
  retryBaseDelayMs: 250,
  retryMaxDelayMs: 5000,
  retryAfterMaxMs: 60_000,
  noServerWaitMs: 30_000,
  maxTopLogprobs: 20,
} as const;

/** Fills a request's generation config with the contract's defaults. */
export function resolveGenerationConfig(g: GenerationConfig = {}): ResolvedGenerationConfig {
  const r: ResolvedGenerationConfig = {
    maxNewTokens: g.maxNewTokens ?? 256,
    minNewTokens: g.minNewTokens ?? 0,
    temperature: g.temperature ?? 1,
    topP: g.topP ?? 1,
    topK: g.topK ?? 0,
    greedy: g.greedy ?? false,
    stopTokenIds: g.stopTokenIds ?? [],
    stop: g.stop ?? [],
    n: g.n ?? 1,
    seed: g.seed,
    topLogprobs: g.topLogprobs ?? 0,
  };
  if (!Number.isInteger(r.maxNewTokens) || r.maxNewTokens < 0) {
    throw new EngineError(
      'CONFIG',
      `maxNewTokens must be a non-negative integer, got ${r.maxNewTokens}`,
    );
  }
  if (!Number.isInteger(r.n) || r.n < 1)
    throw new EngineError('CONFIG', `n must be ≥ 1, got ${r.n}`);
  if (!(r.temperature >= 0)) throw new EngineError('CONFIG', `temperature must be ≥ 0`);
  if (!(r.topP > 0 && r.topP <= 1)) throw new EngineError('CONFIG', `topP must be in (0, 1]`);
  if (!Number.isInteger(r.topLogprobs) || r.topLogprobs < 0)
    throw new EngineError('CONFIG', `topLogprobs must be a non-negative integer`);
  return r;
}

interface Accumulated {
  tokens: number[];
  logprobs: number[];
  versions: number[];
  /** Set when alternatives were asked. */
  top: TopLogprobs[] | undefined;
}

function accumulated(g: ResolvedGenerationConfig): Accumulated {
  return { tokens: [], logprobs: [], versions: [], top: g.topLogprobs > 0 ? [] : undefined };
}

/** The request's result from what a sample accumulated. */
function resultOf(acc: Accumulated, stopReason: StopReason, started: number): GenerateResult {
  return {
    outputTokens: acc.tokens,
    outputLogprobs: acc.logprobs,
    outputVersions: acc.versions,
    ...(acc.top ? { outputTopLogprobs: acc.top } : {}),
    stopReason,
    latencyMs: Date.now() - started,
  };
}

/** `req.onTokens` for sample `sample`; a listener's error does not fail the request. */
function teller(req: GenerateRequest, sample: number): (t: SampleTokens) => void {
  let listener = req.onTokens;
  return (t) => {
    try {
      listener?.({ sample, ...t });
    } catch {
      listener = undefined;
    }
  };
}

/**
 * Tells each sample's streamed tokens to its listener, none past `limit` per sample (the
 * non-streamed path drops tokens past the budget the same way).
 */
function tellUpTo(
  tells: Array<(t: SampleTokens) => void>,
  limit: number,
): (t: StreamedTokens) => void {
  const told = tells.map(() => 0);
  return (t) => {
    const take = Math.min(t.tokens.length, Math.max(0, limit - told[t.sample]!));
    if (take === 0) return;
    told[t.sample]! += take;
    tells[t.sample]!(sliceTokens(t, 0, take));
  };
}

/**
 * One streamed event's data as JSON; an error event (`{"error": {...}}`, how SGLang and vLLM
 * report a failure after the 200 went out) as the `EngineError('HTTP_STATUS')` a failed answer gives.
 */
function parseEvent(data: string, url: string): unknown {
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    throw new EngineError('PROTOCOL', `unexpected event from ${url}: ${data.slice(0, 200)}`, {
      url,
    });
  }
  // `{"error": {...}}`, or the older `{"object": "error", "message": ...}` of vLLM.
  type ErrorBody = { message?: unknown; code?: unknown };
  const j = json as (ErrorBody & { error?: ErrorBody; object?: unknown }) | null;
  const err: ErrorBody | undefined = j?.object === 'error' ? j : (j?.error ?? undefined);
  if (err) {
    const status = typeof err.code === 'number' ? err.code : undefined;
    throw new EngineError(
      'HTTP_STATUS',
      `${url} failed part way through a streamed answer: ${typeof err.message === 'string' ? err.message : JSON.stringify(err)}`,
      { url, ...(status === undefined ? {} : { status }) },
    );
  }
  return json;
}

/** A LoRA adapter loaded on the servers, and our segments running under it. */
interface LiveAdapter {
  name: string;
  /** Its PEFT directory (removed once it is unloaded). */
  path: string;
  version: number;
  /** Generation calls in flight under it. */
  calls: Set<Promise<unknown>>;
  /** Aborted to cut those calls when it is retired. */
  cancel: AbortController;
}

/** Full weights as an update carries them: a checkpoint directory, or the tensors in memory. */
type WeightSource = { path: string } | { tensors: NamedTensors };

/** The steps of a weight update, as a timed-out one names them. */
export type WeightSyncPhase = 'pause' | 'reload' | 'continue' | 'catch-up reload';

/** The version a weight update installs and when it must be done (`Date.now()` ms). */
interface SyncDeadline {
  version: number;
  deadline: number;
}

/** Whether every promise of `ps` settles before `deadline` (`Date.now()` ms). */
async function settledBy(ps: Promise<unknown>[], deadline: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>(
    (r) => (timer = setTimeout(() => r(false), deadline - Date.now())),
  );
  try {
    return await Promise.race([Promise.allSettled(ps).then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Consecutive aborts with no new token after which a request is given up. */
const maxEmptyAborts = 50;

/** An {@link InferenceEngine} over HTTP inference servers; see the module comment. */
export class RemoteEngine implements InferenceEngine {
  readonly kind: string;
  readonly maxTopLogprobs: number;
  private readonly protocol: EngineProtocol;
  private readonly opts: Required<
    Omit<RemoteEngineOptions, 'writeCheckpoint' | 'onServerEvent' | 'loraDir' | 'weightSync'>
  > &
    Pick<RemoteEngineOptions, 'writeCheckpoint' | 'loraDir'>;
  /** Rank 0 of the servers' weight group, with `weightSync`. */
  private readonly distributed: DistributedWeights | undefined;
  private readonly pool: ServerPool;
  private readonly gate = new RequestGate();
  private readonly httpInFlight = new Set<Promise<unknown>>();
  private cancel = new AbortController();
  /** Aborted by `close`: ends retry waits at once. */
  private readonly closing = new AbortController();
  private version = 0;
  private userPause: 'abort' | 'wait' | null = null;
  /** The last full weights: a checkpoint's path, or (sent in memory) the tensors themselves. */
  private lastUpdate: { source: WeightSource; version: number } | null = null;
  /** Servers this engine put to sleep and has not woken. */
  private readonly asleep = new Set<string>();
  /** Servers a failed non-atomic reload left without usable weights. */
  private readonly withoutWeights = new Set<string>();
  private updateChain: Promise<void> = Promise.resolve();
  private closed = false;
  /** The LoRA adapters loaded on the servers, oldest first; the last is the current version's. */
  private adapters: LiveAdapter[] = [];
  /** Every adapter name this engine has used: a name is never given to other weights. */
  private readonly adapterNames = new Set<string>();

  constructor(protocol: EngineProtocol, options: RemoteEngineOptions) {
    this.kind = protocol.kind;
    this.protocol = protocol;
    this.opts = {
      ...remoteEngineDefaults,
      healthPath: '/health',
      healthIntervalMs: 5000,
      healthTimeoutMs: 5000,
      healthFailureThreshold: 2,
      loraSlots: 2,
      ...options,
    };
    if (!Number.isInteger(this.opts.loraSlots) || this.opts.loraSlots < 2)
      throw new EngineError(
        'CONFIG',
        `loraSlots must be an integer ≥ 2 (the maximum staleness + 2), got ${this.opts.loraSlots}`,
      );
    this.maxTopLogprobs = this.opts.maxTopLogprobs;
    const ws = options.weightSync;
    if (ws && !protocol.distributed)
      throw new EngineError(
        'CONFIG',
        `${this.kind} servers take no weights over ${ws.backend} here`,
      );
    this.distributed = ws && new DistributedWeights(ws, this.kind, protocol.distributed!);
    this.pool = new ServerPool({
      urls: options.urls,
      healthPath: this.opts.healthPath,
      healthIntervalMs: this.opts.healthIntervalMs,
      healthTimeoutMs: this.opts.healthTimeoutMs,
      failureThreshold: this.opts.healthFailureThreshold,
      beforeUp: (url) => this.catchUp(url),
    });
    if (options.onServerEvent) this.pool.onEvent(options.onServerEvent);
    this.pool.start();
  }

  /** Listens for servers going down or coming back; returns the function that stops listening. */
  onServerEvent(listener: (e: ServerEvent) => void): () => void {
    return this.pool.onEvent(listener);
  }

  /** Each server's state: up or down, requests in flight, requests routed so far. */
  servers(): ServerStatus[] {
    return this.pool.snapshot();
  }

  /**
   * The protocol's logprob checks, and the alternatives asked within what the servers return
   * (SGLang `top_logprobs_num`, vLLM `logprobs: k`).
   */
  private checkConfig(g: ResolvedGenerationConfig): void {
    this.protocol.checkConfig(g);
    if (g.topLogprobs > this.maxTopLogprobs) {
      throw new EngineError(
        'CONFIG',
        `topLogprobs ${g.topLogprobs} is over this engine's maxTopLogprobs (${this.maxTopLogprobs})`,
      );
    }
  }

  getVersion(): number {
    return this.version;
  }

  async generate(req: GenerateRequest): Promise<GenerateResult> {
    const g = resolveGenerationConfig(req.gconfig);
    if (g.n !== 1)
      throw new EngineError('CONFIG', `generate takes n = 1 (got ${g.n}); use generateN`);
    this.checkConfig(g);
    const started = Date.now();
    const acc = accumulated(g);
    const stop = await this.continueSample(
      req.rid ?? randomUUID(),
      req.inputIds,
      g,
      acc,
      null,
      teller(req, 0),
      req.onTokens !== undefined,
    );
    return resultOf(acc, stop, started);
  }

  async generateN(req: GenerateRequest): Promise<GenerateResult[]> {
    const g = resolveGenerationConfig(req.gconfig);
    this.checkConfig(g);
    const started = Date.now();
    const rid = req.rid ?? randomUUID();
    await this.gate.pass();
    // One request for all n samples (the server shares the prompt's prefill), then any sample a
    // weight update cut short continues on its own.
    // With a listener the server streams and each sample is told of its tokens as they come.
    const tells = Array.from({ length: g.n }, (_, i) => teller(req, i));
    const stream = req.onTokens !== undefined;
    const { outs, version, streamed } = await this.send(
      rid,
      req.inputIds,
      g,
      g.n,
      stream ? tellUpTo(tells, g.maxNewTokens) : undefined,
    );
    return Promise.all(
      outs.map(async (first, i) => {
        const acc = accumulated(g);
        const stop = await this.continueSample(
          rid,
          req.inputIds,
          g,
          acc,
          { out: first, version, streamed },
          tells[i]!,
          stream,
        );
        return resultOf(acc, stop, started);
      }),
    );
  }

  async updateWeights(update: WeightUpdate, version: number): Promise<void> {
    this.assertOpen();
    let path: string;
    if (update.kind === 'lora') {
      const dir = this.opts.loraDir;
      if (!dir || !this.protocol.loadAdapter)
        throw new EngineError(
          'UNSUPPORTED',
          dir
            ? `${this.kind} servers have no run-time LoRA route here`
            : `${this.kind}: LoRA updates are written for the servers to load: set loraDir`,
        );
      const adapter = update.adapter;
      const run = this.updateChain.then(() => this.applyAdapter(dir, adapter, version));
      this.updateChain = run.catch(() => undefined);
      return run;
    }
    if (update.kind === 'tensors' && this.distributed) {
      const source = { tensors: update.tensors };
      await this.distributed.prepare();
      const run = this.updateChain.then(() => this.applyUpdate(source, version));
      this.updateChain = run.catch(() => undefined);
      return run;
    }
    if (update.kind === 'disk') path = update.path;
    else if (this.opts.writeCheckpoint)
      path = await this.opts.writeCheckpoint(update.tensors, version);
    else {
      throw new EngineError(
        'UNSUPPORTED',
        `${this.kind} servers load weights from disk: pass { kind: 'disk', path } or set writeCheckpoint`,
      );
    }
    this.protocol.validateUpdate?.(path);
    const run = this.updateChain.then(() => this.applyUpdate({ path }, version));
    this.updateChain = run.catch(() => undefined);
    return run;
  }

  async pause(opts: PauseOptions = {}): Promise<void> {
    this.assertOpen();
    const mode = opts.mode ?? 'abort';
    this.userPause = mode;
    this.gate.close('paused');
    if (mode === 'abort') await this.abortServers();
    await Promise.allSettled([...this.httpInFlight]);
  }

  async resume(): Promise<void> {
    this.assertOpen();
    // Requests are let go even when a server fails to continue: held forever, they would hang;
    // let go, they fail over or fail with a clear error.
    try {
      if (this.userPause === 'abort')
        await this.onUpServers('continue', (call) => this.protocol.continueServer(call));
    } finally {
      this.userPause = null;
      this.gate.open('paused');
    }
  }

  async sleep(): Promise<void> {
    this.assertOpen();
    this.gate.close('asleep');
    // Servers release memory only when idle (SGLang asserts it).
    await Promise.allSettled([...this.httpInFlight]);
    await this.onUpServers('sleep', async (call, url) => {
      await this.protocol.sleep(call);
      this.asleep.add(url);
    });
  }

  async wakeUp(): Promise<void> {
    this.assertOpen();
    try {
      await this.onUpServers('wake up', async (call, url) => {
        await this.protocol.wakeUp(call);
        this.asleep.delete(url);
      });
    } finally {
      this.gate.open('asleep');
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const err = new EngineError('CLOSED', 'the engine is closed');
    this.gate.fail(err);
    this.cancel.abort(err);
    this.closing.abort(err);
    this.pool.close();
    this.distributed?.close();
    await Promise.allSettled([...this.httpInFlight]);
    for (const a of this.adapters) rmSync(a.path, { recursive: true, force: true });
  }

  /** The LoRA adapter names loaded on the servers now, oldest first (the last is current). */
  loadedAdapters(): string[] {
    return this.adapters.map((a) => a.name);
  }

  /**
   * A LoRA policy's update: writes the adapter as a PEFT directory under a name no weights had
   * before (`rtjob-v<version>`: a server's prefix cache is keyed by adapter, so no cached prefix
   * outlives its weights), loads it on every up server (nothing is paused: segments in flight
   * keep the adapter they were sent with), then tags later segments with `version` and the new
   * name, and retires the oldest adapters beyond `loraSlots - 1`. A server that fails the load
   * is taken out until it has loaded the current adapter (catch-up); when every server fails,
   * the version stays and the error is thrown.
   */
  private async applyAdapter(dir: string, lora: LoraAdapter, version: number): Promise<void> {
    this.assertOpen();
    let name = `rtjob-v${version}`;
    for (let k = 2; this.adapterNames.has(name); k++) name = `rtjob-v${version}-${k}`;
    this.adapterNames.add(name);
    const path = join(dir, name);
    writeLoraAdapter(path, lora);
    const sync = { version, deadline: Date.now() + this.opts.weightSyncTimeoutMs };
    const urls = this.pool.upUrls();
    const results = await Promise.allSettled(
      urls.map((url) =>
        this.protocol.loadAdapter!(this.callOn(url, { ...sync, phase: 'reload' }), name, path),
      ),
    );
    const failed = results.flatMap((r, i) =>
      r.status === 'rejected' ? [{ url: urls[i]!, err: r.reason as Error }] : [],
    );
    if (failed.length > 0 && failed.length === urls.length) {
      rmSync(path, { recursive: true, force: true });
      const first = failed[0]!.err;
      throw new EngineError(
        isEngineError(first) ? first.code : 'HTTP_STATUS',
        `LoRA update to version ${version} failed on every server (the servers keep version ${this.version}): ${failed.map((f) => f.err.message).join('; ')}`,
        { cause: first, url: failed[0]!.url, phase: 'reload' },
      );
    }
    for (const f of failed)
      this.pool.markDownUrl(f.url, `loading LoRA adapter ${name} failed: ${f.err.message}`);
    this.adapters.push({ name, path, version, calls: new Set(), cancel: new AbortController() });
    this.version = version;
    while (this.adapters.length > this.opts.loraSlots - 1)
      await this.retireAdapter(this.adapters.shift()!, sync);
  }

  /**
   * Unloads `a` from every up server once no segment of ours runs under it: segments still in
   * flight are cut first (they continue on the current adapter as interrupted samples).
   */
  private async retireAdapter(a: LiveAdapter, sync?: SyncDeadline): Promise<void> {
    if (a.calls.size > 0) {
      a.cancel.abort(
        new EngineError('ABORTED', `adapter ${a.name} retired: it is past the LoRA slots`),
      );
      await Promise.allSettled([...a.calls]);
    }
    // An unload that fails leaves a slot taken on that server; the next catch-up clears it.
    await Promise.allSettled(
      this.pool
        .upUrls()
        .map((url) =>
          this.protocol.unloadAdapter!(
            this.callOn(url, sync && { ...sync, phase: 'reload' }),
            a.name,
          ),
        ),
    );
    rmSync(a.path, { recursive: true, force: true });
  }

  /**
   * Sends segments until the sample stops: `prompt + output so far`, asking for what is left of
   * the token budget. `first` is a segment already received (from a batched `n` request).
   */
  private async continueSample(
    rid: string,
    prompt: number[],
    g: ResolvedGenerationConfig,
    acc: Accumulated,
    first: { out: SampleOutput; version: number; streamed: boolean } | null,
    tell: (t: SampleTokens) => void,
    stream: boolean,
  ): Promise<StopReason> {
    let emptyAborts = 0;
    let pending = first;
    for (;;) {
      const left = g.maxNewTokens - acc.tokens.length;
      if (!pending) {
        if (left <= 0) return 'length';
        await this.gate.pass();
        const seg: ResolvedGenerationConfig = {
          ...g,
          maxNewTokens: left,
          minNewTokens: Math.max(0, g.minNewTokens - acc.tokens.length),
        };
        const { outs, version, streamed } = await this.send(
          rid,
          acc.tokens.length ? prompt.concat(acc.tokens) : prompt,
          seg,
          1,
          stream ? tellUpTo([tell], left) : undefined,
        );
        pending = { out: outs[0]!, version, streamed };
      }
      const { out, version, streamed } = pending;
      pending = null;
      const take = Math.min(out.tokens.length, Math.max(0, left));
      for (let i = 0; i < take; i++) {
        acc.tokens.push(out.tokens[i]!);
        acc.logprobs.push(out.logprobs[i]!);
        acc.versions.push(version);
        acc.top?.push(out.top?.[i] ?? { ids: [], logprobs: [] });
      }
      // A streamed segment told its tokens as they came.
      if (take > 0 && !streamed) tell(sliceTokens(out, 0, take));
      if (out.finish !== 'abort') return out.tokens.length > left ? 'length' : out.finish;
      if (this.userPause === 'abort' || this.closed) return 'abort';
      if (acc.tokens.length >= g.maxNewTokens) return 'length';
      emptyAborts = take === 0 ? emptyAborts + 1 : 0;
      if (emptyAborts > maxEmptyAborts) {
        throw new EngineError(
          'PROTOCOL',
          `request aborted ${emptyAborts} times without progress: ${out.abortMessage ?? ''}`,
        );
      }
      // Aborted by our own weight update: the gate holds us until it is done. Aborted by someone
      // else: back off a little, the server holds new requests while it is paused anyway.
      if (this.gate.isOpen && emptyAborts > 0) await delay(Math.min(1000, 25 * 2 ** emptyAborts));
    }
  }

  /**
   * One generation request with retries and failover; returns the samples, the version sent
   * under, and whether they were streamed. With `onStream` the server streams and `onStream` is
   * told of each event's tokens; a stream that fails after some tokens came is not sent again
   * from scratch: its samples return as interrupted (finish `abort`) with the tokens so far,
   * and the caller continues them like samples a weight update cut short.
   */
  private async send(
    rid: string,
    inputIds: number[],
    g: ResolvedGenerationConfig,
    n: number,
    onStream?: (t: StreamedTokens) => void,
  ): Promise<{ outs: SampleOutput[]; version: number; streamed: boolean }> {
    const streamed = onStream !== undefined;
    let attempt = 0;
    let failovers = 0;
    for (;;) {
      const lease = await this.pool.acquire(rid, this.opts.noServerWaitMs);
      // The version and the adapter that holds its weights, taken together.
      const version = this.version;
      const adapter = this.adapters.at(-1);
      const { path, body } = this.protocol.generateRequest(inputIds, g, n, streamed, adapter?.name);
      const opts = {
        timeoutMs: this.opts.requestTimeoutMs,
        signal: AbortSignal.any([
          lease.signal,
          this.cancel.signal,
          ...(adapter ? [adapter.cancel.signal] : []),
        ]),
      };
      const reader = onStream && this.protocol.streamReader(n, lease.url, g.topLogprobs);
      const got: SampleOutput[] = Array.from({ length: n }, () => ({
        tokens: [],
        logprobs: [],
        ...(g.topLogprobs > 0 ? { top: [] } : {}),
        finish: 'abort' as const,
      }));
      const call = reader
        ? httpStream(lease.url + path, body, opts, (data) => {
            for (const t of reader.read(parseEvent(data, lease.url))) {
              const s = got[t.sample]!;
              s.tokens.push(...t.tokens);
              s.logprobs.push(...t.logprobs);
              s.top?.push(...(t.top ?? []));
              onStream!(t);
            }
          })
        : httpCall(lease.url + path, body, { ...opts, expectJson: true });
      this.httpInFlight.add(call);
      adapter?.calls.add(call);
      try {
        const json = await call;
        const outs = reader
          ? reader.end()
          : this.protocol.parseGenerate(json, n, lease.url, g.topLogprobs);
        return { outs, version, streamed };
      } catch (e) {
        if (!isEngineError(e)) throw e;
        if (got.some((s) => s.tokens.length > 0)) {
          // Tokens were told already: continue from them rather than start over.
          if (e.code === 'NETWORK' || e.code === 'TIMEOUT')
            this.pool.reportFailure(lease.url, e.message);
          if (e.code !== 'ABORTED' && !e.retryable) throw e;
          return {
            outs: got.map((s) => ({ ...s, abortMessage: e.message })),
            version,
            streamed,
          };
        }
        if (e.code === 'ABORTED') {
          return {
            outs: Array.from({ length: n }, () => ({
              tokens: [],
              logprobs: [],
              finish: 'abort' as const,
              abortMessage: e.message,
            })),
            version,
            streamed,
          };
        }
        if (e.code === 'SERVER_DOWN' && failovers++ < this.pool.urls.length) continue;
        if (!e.retryable || attempt >= this.opts.maxRetries) throw e;
        if (e.code === 'NETWORK' || e.code === 'TIMEOUT')
          this.pool.reportFailure(lease.url, e.message);
        const backoff = backoffDelayMs(attempt++, {
          baseDelayMs: this.opts.retryBaseDelayMs,
          maxDelayMs: this.opts.retryMaxDelayMs,
        });
        await delay(
          Math.max(backoff, Math.min(e.retryAfterMs ?? 0, this.opts.retryAfterMaxMs)),
          this.closing.signal,
        );
      } finally {
        this.httpInFlight.delete(call);
        adapter?.calls.delete(call);
        lease.release();
      }
    }
  }

  private async applyUpdate(source: WeightSource, version: number): Promise<void> {
    this.assertOpen();
    const deadline = Date.now() + this.opts.weightSyncTimeoutMs;
    const sync = { version, deadline };
    this.gate.close('updating');
    try {
      if (this.userPause === null) await this.abortServers(sync);
      // Requests a server did not abort are cancelled here at the deadline: they are re-sent
      // after the update (as an interrupted sample) instead of holding it.
      const inFlight = [...this.httpInFlight];
      if (!(await settledBy(inFlight, deadline))) {
        this.cancel.abort(new EngineError('ABORTED', 'cancelled by a weight update'));
        this.cancel = new AbortController();
        await Promise.allSettled(inFlight);
      }
      const urls = this.pool.upUrls();
      const { results, atomic } = await this.loadOn(urls, source, sync);
      const failed = results.flatMap((r, i) =>
        r.status === 'rejected' ? [{ url: urls[i]!, err: r.reason as Error }] : [],
      );
      // A reload abandoned at the deadline may still land on the server: it serves nothing until
      // a probe has reloaded it with known weights.
      const abandoned = failed.filter(
        (f) => isEngineError(f.err) && f.err.code === 'TIMEOUT' && f.err.phase === 'reload',
      );
      urls.forEach((url, i) => {
        if (results[i]!.status === 'fulfilled') this.withoutWeights.delete(url);
        else if (!atomic) this.withoutWeights.add(url);
      });
      if (failed.length > 0 && failed.length === urls.length) {
        // Where a failed reload rolls back, every server still holds the old weights and stays
        // in service; where it may not, none may serve until a reload succeeds.
        let after = `the servers keep version ${this.version}`;
        if (!atomic) {
          after =
            'the servers may have lost their weights and are out of service until an update succeeds';
        }
        for (const f of failed) {
          if (!atomic || abandoned.includes(f))
            this.pool.markDownUrl(f.url, `weight update failed part way: ${f.err.message}`);
        }
        const codes = new Set(
          failed.map((f) => (isEngineError(f.err) ? f.err.code : 'HTTP_STATUS')),
        );
        const code = codes.size === 1 ? [...codes][0]! : 'HTTP_STATUS';
        const why = failed.map((f) => f.err.message).join('; ');
        const first = failed[0]!.err;
        throw new EngineError(
          code,
          `weight update to version ${version} failed on every server (${after}): ${why}`,
          {
            cause: first,
            url: failed[0]!.url,
            phase: isEngineError(first) ? (first.phase ?? 'reload') : 'reload',
          },
        );
      }
      // A server left on old weights must not serve new-version requests; it rejoins after a
      // health probe and a successful reload (see catchUp).
      for (const f of failed)
        this.pool.markDownUrl(f.url, `weight update failed: ${f.err.message}`);
      this.version = version;
      this.lastUpdate = { source, version };
      // Full weights are the whole policy: adapters over the old base no longer apply.
      const retired = this.adapters;
      this.adapters = [];
      for (const a of retired) await this.retireAdapter(a, sync);
    } finally {
      if (this.userPause === null && !this.closed) {
        // Past the deadline a server still gets a health probe's time to continue; one that
        // does not is taken out (onUpServers).
        const cont = {
          version,
          deadline: Math.max(deadline, Date.now() + this.opts.healthTimeoutMs),
        };
        await this.onUpServers('continue', (call) => this.protocol.continueServer(call), {
          ...cont,
          phase: 'continue',
        }).catch(() => undefined);
      }
      this.gate.open('updating');
    }
  }

  /**
   * Loads `source` on `urls`: each reloads the checkpoint, or all receive the tensors together
   * over the weight group. `atomic`: a server that failed still serves its old weights (SGLang's
   * reload rolls back; a transfer that failed before any bucket landed changed nothing).
   */
  private async loadOn(
    urls: string[],
    source: WeightSource,
    sync: SyncDeadline,
  ): Promise<{ results: PromiseSettledResult<void>[]; atomic: boolean }> {
    const call = (url: string) => this.callOn(url, { ...sync, phase: 'reload' });
    if ('tensors' in source) {
      const sent = await this.distributed!.send(
        urls,
        source.tensors,
        sync.version,
        call,
        sync.deadline,
      );
      return { results: sent.results, atomic: !sent.landed };
    }
    const { path } = source;
    const results = await Promise.allSettled(
      urls.map((url) => this.protocol.reloadWeights(call(url), path, sync.version)),
    );
    return { results, atomic: this.protocol.atomicReload };
  }

  /** A checkpoint of the last weights, written now where they were sent in memory. */
  private async pathOf(last: { source: WeightSource; version: number }): Promise<string> {
    if ('path' in last.source) return last.source.path;
    if (!this.opts.writeCheckpoint)
      throw new EngineError(
        'UNSUPPORTED',
        `a rejoining ${this.kind} server is reloaded from disk: set writeCheckpoint`,
      );
    const path = await this.opts.writeCheckpoint(last.source.tensors, last.version);
    this.lastUpdate = { source: { path }, version: last.version };
    return path;
  }

  /**
   * Pauses every up server with abort; where a server has no such route (or does not answer
   * within the weight sync's deadline), cancels our requests.
   */
  private async abortServers(sync?: SyncDeadline): Promise<void> {
    const supported = await Promise.all(
      this.pool
        .upUrls()
        .map((url) =>
          this.protocol
            .pauseServer(this.callOn(url, sync && { ...sync, phase: 'pause' }))
            .catch(() => false),
        ),
    );
    if (supported.some((s) => !s)) {
      this.cancel.abort(new EngineError('ABORTED', 'cancelled by pause'));
      this.cancel = new AbortController();
    }
  }

  /** Brings a recovered server to the current weights before it takes requests again. */
  private async catchUp(url: string): Promise<void> {
    // An update under way would leave this server a version behind: let it finish first.
    await this.updateChain;
    // While the engine sleeps nothing is served; the server rejoins after wakeUp.
    if (this.gate.has('asleep'))
      throw new EngineError('UNSUPPORTED', 'the engine is asleep', { url });
    const call = this.callOn(url, {
      version: this.lastUpdate?.version ?? this.version,
      deadline: Date.now() + this.opts.weightSyncTimeoutMs,
      phase: 'catch-up reload',
    });
    if (this.asleep.has(url)) {
      // Left asleep when it was taken out; a restarted server is awake and may refuse this.
      await this.protocol.wakeUp(call).catch(() => undefined);
      this.asleep.delete(url);
    }
    const last = this.lastUpdate;
    const current = this.adapters.at(-1);
    if (last) await this.protocol.reloadWeights(call, await this.pathOf(last), last.version);
    else if (this.withoutWeights.has(url) && !current) {
      throw new EngineError(
        'UNSUPPORTED',
        `${url} lost its weights in a failed update; it rejoins after the next successful one`,
        { url },
      );
    }
    if (current) {
      // Whatever adapters it kept (it may not have restarted) are ours: clear them, then load
      // the current one; only new segments reach it, and they name the current adapter.
      for (const a of this.adapters)
        await this.protocol.unloadAdapter!(call, a.name).catch(() => undefined);
      await this.protocol.loadAdapter!(call, current.name, current.path);
    }
    this.withoutWeights.delete(url);
    // A server taken out during an update was left paused by it; resume() continues it when
    // the engine itself is paused.
    if (this.userPause !== 'abort') await this.protocol.continueServer(call);
  }

  /**
   * Runs a control call on every up server. A server that cannot be reached is taken out (it
   * rejoins through catchUp) and does not fail the call unless no server answered; any other
   * failure (the server refused) is thrown.
   */
  private async onUpServers(
    what: string,
    fn: (call: ServerCall, url: string) => Promise<unknown>,
    sync?: SyncDeadline & { phase: WeightSyncPhase },
  ): Promise<void> {
    const urls = this.pool.upUrls();
    const results = await Promise.allSettled(urls.map((url) => fn(this.callOn(url, sync), url)));
    const failed = results.flatMap((r, i) =>
      r.status === 'rejected' ? [{ url: urls[i]!, err: r.reason as unknown }] : [],
    );
    const unreachable = failed.filter(
      (f) => isEngineError(f.err) && ['NETWORK', 'TIMEOUT', 'SERVER_DOWN'].includes(f.err.code),
    );
    for (const f of unreachable)
      this.pool.markDownUrl(f.url, `${what} failed: ${(f.err as Error).message}`);
    const refused = failed.find((f) => !unreachable.includes(f));
    if (refused) throw refused.err;
    if (unreachable.length > 0 && unreachable.length === urls.length) throw unreachable[0]!.err;
  }

  /**
   * Calls routes on `url` under the control time limit; within a weight sync, under what is left
   * of its deadline too, and a call cut by that deadline fails with an `EngineError('TIMEOUT')`
   * that names the sync's version, the phase and the server.
   */
  private callOn(url: string, sync?: SyncDeadline & { phase: WeightSyncPhase }): ServerCall {
    return async (path, body, o) => {
      const watch = this.pool.watch(url);
      const left = sync ? Math.max(1, sync.deadline - Date.now()) : Infinity;
      const byDeadline = left < this.opts.controlTimeoutMs;
      try {
        return await httpCall(url + path, body, {
          method: o?.method,
          timeoutMs: Math.min(this.opts.controlTimeoutMs, left),
          signal: watch.signal,
        });
      } catch (e) {
        if (!sync || !isEngineError(e) || e.code !== 'TIMEOUT') throw e;
        const ms = byDeadline ? this.opts.weightSyncTimeoutMs : this.opts.controlTimeoutMs;
        throw new EngineError(
          'TIMEOUT',
          `weight update to version ${sync.version}: ${sync.phase} on ${url} timed out after ${ms} ms`,
          { url, phase: sync.phase, cause: e },
        );
      } finally {
        watch.release();
      }
    };
  }

  private assertOpen(): void {
    if (this.closed) throw new EngineError('CLOSED', 'the engine is closed');
  }
}
