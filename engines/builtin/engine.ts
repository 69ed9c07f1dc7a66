/**
 * The builtin inference engine: the TF.js model with batched decoding over a shared KV cache and
 * continuous batching. Requests that arrive while a batch runs are prefilled and join it at the
 * next decode step; finished rows leave at once. Each token records the logprob of the sampled
 * token under softmax(logits / temperature) and the weight version that produced it.
 *
 * @module
 */
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { backendOnHost, initBackend } from '../../model/backend.ts';
import { loadModel, readWeights } from '../../model/checkpoint.ts';
import {
  type BatchKVCache,
  decodeStep,
  decodeStepAsync,
  prefill,
  prefillAsync,
} from '../../model/kv-cache.ts';
import { CausalLM } from '../../model/llama.ts';
import { sampleToken, seededRandom, topLogprobs } from '../../model/sampling.ts';
import type { ChatTokenizer } from '../../model/tokenizer.ts';
import type {
  GenerateRequest,
  GenerateResult,
  InferenceEngine,
  PauseOptions,
  WeightUpdate,
} from '../types.ts';
import type { LoraAdapter } from '../../model/lora-adapter.ts';
import type { NamedTensors } from '../../model/tensors.ts';
import { EngineError } from '../http/errors.ts';
import {
  appendToken,
  generateEach,
  generateOne,
  newLocalSample,
  resolveSample,
  sampleContext,
  type LocalSample,
} from '../local-sample.ts';

/** The builtin engine's error for a request it cannot serve. */
const invalidRequest = (message: string) => new EngineError('CONFIG', message);

/** Options of {@link BuiltinEngine.create}. */
export interface BuiltinEngineOptions {
  /** HF model directory to load (or pass `model`). */
  modelPath?: string;
  /** An already loaded model; the engine does not dispose or offload it. */
  model?: CausalLM;
  /** Needed for stop strings; loaded from `modelPath` when present there. */
  tokenizer?: ChatTokenizer;
  /** Most sequences decoded together. @default 256 */
  maxBatchSize?: number;
  /** Most new requests prefilled in one forward pass. @default 64 */
  maxPrefillBatch?: number;
  /** Seed of the engine's sampling stream (requests without their own seed). @default 0 */
  seed?: number;
  /** Version of the initial weights. @default 0 */
  version?: number;
  /** Tokens that always end generation; defaults to the config's eos ids. */
  eosTokenIds?: number[];
}

/** An event-loop turn shorter than this ran nothing (an idle turn takes ~3 µs, p99 ~20 µs). */
const idleTurnMs = 0.05;
/** Bounds the turns between two decode steps, so a flood of I/O cannot stall decoding. */
const maxTurnsBetweenSteps = 32;

interface Active extends LocalSample {
  /** Next-token logits of this row (after prefill or the last decode step). */
  logits?: Float32Array;
  /** The weight version that computed `logits` (and this row's KV cache): its next token's. */
  logitsVersion?: number;
}

/**
 * @example
 * const engine = await BuiltinEngine.create({ modelPath: 'model/pretrained/rtjob-tiny-math' });
 * const r = await engine.generate({ inputIds, gconfig: { maxNewTokens: 32, temperature: 1 } });
 */
export class BuiltinEngine implements InferenceEngine {
  readonly kind = 'builtin';
  readonly maxTopLogprobs = 20;
  readonly tokenizer: ChatTokenizer | undefined;
  private model: CausalLM | undefined;
  private readonly ownsModel: boolean;
  private offloaded: ReturnType<CausalLM['exportWeights']> | undefined;
  /** The adapter of an offloaded model (or one that arrived while asleep). */
  private offloadedAdapter: LoraAdapter | undefined;
  private readonly config: CausalLM['config'];
  private readonly maxBatch: number;
  private readonly maxPrefill: number;
  private readonly eos: number[];
  private readonly rand: () => number;
  private version: number;
  private pending: Active[] = [];
  private running: Active[] = [];
  private cache: BatchKVCache | undefined;
  private looping = false;
  private kickQueued = false;
  private paused = false;
  private draining = false;
  private sleeping = false;
  private closed = false;
  private idleWaiters: (() => void)[] = [];
  /** Counters for benchmarks and metrics. */
  readonly stats = { generatedTokens: 0, decodeSteps: 0, prefills: 0, maxRows: 0 };

  private constructor(
    model: CausalLM,
    owns: boolean,
    opts: BuiltinEngineOptions,
    tokenizer?: ChatTokenizer,
  ) {
    this.model = model;
    this.ownsModel = owns;
    this.config = model.config;
    this.tokenizer = tokenizer;
    this.maxBatch = opts.maxBatchSize ?? 256;
    this.maxPrefill = opts.maxPrefillBatch ?? 64;
    this.rand = seededRandom(opts.seed ?? 0);
    this.version = opts.version ?? 0;
    const eos = opts.eosTokenIds ?? model.config.eos_token_id ?? [];
    this.eos = Array.isArray(eos) ? eos : [eos];
  }

  /** Loads the model (from `modelPath`) and returns a ready engine. */
  static async create(opts: BuiltinEngineOptions): Promise<BuiltinEngine> {
    await initBackend();
    if (opts.model) return new BuiltinEngine(opts.model, false, opts, opts.tokenizer);
    if (!opts.modelPath)
      throw new EngineError('CONFIG', 'BuiltinEngine: modelPath or model is required');
    const loaded = await loadModel(opts.modelPath);
    return new BuiltinEngine(loaded.model, true, opts, opts.tokenizer ?? loaded.tokenizer);
  }

  getVersion(): number {
    return this.version;
  }

  /** Sequences being decoded plus those waiting to join. */
  get load(): { running: number; pending: number } {
    return { running: this.running.length, pending: this.pending.length };
  }

  generate(req: GenerateRequest): Promise<GenerateResult> {
    return generateOne(req, (r, seed, i) => this.submit(r, seed, i), invalidRequest);
  }

  generateN(req: GenerateRequest): Promise<GenerateResult[]> {
    return generateEach(req, (r, seed, i) => this.submit(r, seed, i));
  }

  private submit(
    req: GenerateRequest,
    seed: number | undefined,
    sample: number,
  ): Promise<GenerateResult> {
    if (this.closed) return Promise.reject(new EngineError('CLOSED', 'BuiltinEngine is closed'));
    return new Promise<GenerateResult>((resolve, reject) => {
      const a = newLocalSample(
        req,
        seed,
        sample,
        {
          vocabSize: this.config.vocab_size,
          maxTokens: this.config.max_position_embeddings,
          maxTopLogprobs: this.maxTopLogprobs,
          tokenizer: this.tokenizer,
          eos: this.eos,
          rand: this.rand,
        },
        { resolve, reject },
      );
      if (typeof a === 'string') return reject(invalidRequest(a));
      this.pending.push(a);
      this.kick();
    });
  }

  private kick(): void {
    if (this.looping || this.kickQueued || this.paused || this.sleeping || this.closed) return;
    // Start on a microtask so requests submitted in the same tick are prefilled together.
    this.kickQueued = true;
    queueMicrotask(() => {
      this.kickQueued = false;
      if (!this.looping && !this.paused && !this.sleeping && !this.closed) void this.loop();
    });
  }

  private async loop(): Promise<void> {
    this.looping = true;
    try {
      while (!this.closed && !this.paused && !this.sleeping) {
        const model = this.model!;
        this.requeueStale();
        const joining =
          this.pending.length && this.running.length < this.maxBatch
            ? this.takeJoining(Math.min(this.maxPrefill, this.maxBatch - this.running.length))
            : [];
        if (joining.length) {
          try {
            // A row a weight update interrupted is prefilled with its output so far.
            const prompts = joining.map(sampleContext);
            const version = this.version;
            // Where tensors live on a GPU (webgpu) they can only be read asynchronously.
            const { cache, logits } = backendOnHost()
              ? prefill(model, prompts)
              : await prefillAsync(model, prompts);
            const V = this.config.vocab_size;
            joining.forEach((a, i) => {
              a.logits = logits.slice(i * V, (i + 1) * V);
              a.logitsVersion = version;
            });
            if (this.cache) this.cache.append(cache);
            else this.cache = cache;
            this.running.push(...joining);
            this.stats.prefills++;
          } catch (e) {
            joining.forEach((a) => a.reject(e as Error));
          }
        }
        if (!this.running.length) break;
        // Weights changed while the step computed: its logits are of the old ones; start over.
        if (this.running.some((a) => a.logitsVersion !== this.version)) continue;
        this.stats.maxRows = Math.max(this.stats.maxRows, this.running.length);
        const V = this.config.vocab_size;
        const keep: number[] = [];
        const next: number[] = [];
        const rows = this.running;
        rows.forEach((a, row) => {
          // A listener paused, slept or closed the engine: its rows were returned as they stand.
          if (this.running !== rows) return;
          const { token, logprob } = sampleToken(a.logits!, 0, V, a.sampling, a.rand);
          const top =
            a.topN > 0 ? topLogprobs(a.logits!, 0, V, a.sampling.temperature, a.topN) : undefined;
          this.stats.generatedTokens++;
          // The token's version is the one whose weights computed its distribution.
          const reason = appendToken(a, token, logprob, a.logitsVersion!, this.tokenizer, top);
          if (this.running !== rows) return;
          if (reason) resolveSample(a, reason);
          else {
            keep.push(row);
            next.push(token);
          }
        });
        if (this.running !== rows) continue;
        this.running = keep.map((r) => rows[r]!);
        // New weights arrived during sampling (a listener loaded them): a decode step would run
        // them over the old cache; the next turn prefills these rows again instead.
        if (!this.running.length || this.running.some((a) => a.logitsVersion !== this.version)) {
          this.dropCache();
        } else {
          try {
            this.cache!.select(keep);
            const version = this.version;
            const logits = backendOnHost()
              ? decodeStep(model, this.cache!, next)
              : await decodeStepAsync(model, this.cache!, next);
            this.running.forEach((a, i) => {
              a.logits = logits.slice(i * V, (i + 1) * V);
              a.logitsVersion = version;
            });
            this.stats.decodeSteps++;
          } catch (e) {
            this.running.forEach((a) => a.reject(e as Error));
            this.running = [];
            this.dropCache();
          }
        }
        await this.letArrivalsIn();
      }
    } finally {
      this.looping = false;
      if (!this.running.length) {
        this.dropCache();
        const w = this.idleWaiters;
        this.idleWaiters = [];
        w.forEach((f) => f());
      }
    }
    if (this.pending.length && !this.paused && !this.sleeping && !this.closed && !this.draining)
      this.kick();
  }

  /**
   * Gives the event loop turns between decode steps, so new requests, pause() and updateWeights()
   * get in. A request that comes over HTTP (the agent gateway) needs several turns to reach
   * `generate` (the client's response read, the agent's next call, the server's request and body
   * reads), and a decode step blocks the loop; with one turn per step, requests that arrive
   * together reached the engine steps apart and were prefilled one by one (46 prefill calls and 76
   * decode steps for 64 gateway episodes against 9 and 57 for the same episodes as a step
   * function, bench/README.md). So turns are given until one passes with nothing to do (an idle
   * turn takes ~3 µs, p99 ~20 µs here), at most {@link maxTurnsBetweenSteps}.
   */
  private async letArrivalsIn(): Promise<void> {
    for (let i = 0; i < maxTurnsBetweenSteps; i++) {
      const t0 = performance.now();
      await yieldToEventLoop();
      if (performance.now() - t0 < idleTurnMs) return;
    }
  }

  /**
   * Interruptible generation (AReaL's): rows whose KV cache and logits were computed by weights
   * older than the engine's now go back to the front of the queue and are prefilled again, prompt
   * plus output so far, on the new weights. So every token is sampled from one version's
   * distribution, computed over a cache of that version only, and labelled with it; an update
   * costs the rows in flight one prefill, never a wait.
   */
  private requeueStale(): void {
    if (!this.running.some((a) => a.logitsVersion !== this.version)) return;
    this.pending.unshift(...this.running);
    this.running = [];
    this.dropCache();
  }

  /**
   * The next `n` queued rows to prefill. While `pause({ mode: 'wait' })` drains, only rows a
   * weight update re-queued rejoin: they are in flight, and the pause waits for them.
   */
  private takeJoining(n: number): Active[] {
    if (!this.draining) return this.pending.splice(0, n);
    const rows = this.pending.filter((a) => a.tokens.length > 0).slice(0, n);
    this.pending = this.pending.filter((a) => !rows.includes(a));
    return rows;
  }

  private dropCache(): void {
    this.cache?.dispose();
    this.cache = undefined;
  }

  /** Returns every request in flight (running, or re-queued by a weight update) as `abort`. */
  private abortRunning(): void {
    const rows = [...this.running, ...this.pending.filter((a) => a.tokens.length > 0)];
    this.running = [];
    this.pending = this.pending.filter((a) => a.tokens.length === 0);
    this.dropCache();
    rows.forEach((a) => resolveSample(a, 'abort'));
  }

  /**
   * Stops decoding. `abort` (default) returns running requests now with their partial output and
   * stop reason `abort`; `wait` lets them finish first. Queued requests wait for `resume`.
   */
  async pause(opts: PauseOptions = {}): Promise<void> {
    if ((opts.mode ?? 'abort') === 'wait') {
      this.draining = true;
      if (this.looping && this.running.length)
        await new Promise<void>((r) => this.idleWaiters.push(r));
      this.draining = false;
    }
    this.paused = true;
    this.abortRunning();
  }

  async resume(): Promise<void> {
    this.paused = false;
    this.kick();
  }

  /**
   * Loads new weights between decode steps and tags later tokens with `version`. Requests in
   * flight are not waited for: before their next token they are prefilled again (prompt + output
   * so far) on the new weights ({@link requeueStale}), so their tokens before the update carry the
   * old version and those after it the new one, each sampled from that version's distribution.
   * Call `pause` first where a request must not span two versions.
   *
   * A `lora` update loads the adapter's matrices into the model's LoRA variables (attached on the
   * first one): the base weights are neither copied nor rewritten, and the same requeue keeps
   * every token labelled with the version whose adapter computed it.
   */
  async updateWeights(update: WeightUpdate, version: number): Promise<void> {
    if (this.closed) throw new EngineError('CLOSED', 'BuiltinEngine is closed');
    if (update.kind === 'lora') {
      if (this.offloaded) this.offloadedAdapter = update.adapter;
      else this.model!.loadLora(update.adapter);
      this.version = version;
      return;
    }
    const tensors = update.kind === 'tensors' ? update.tensors : readWeights(update.path);
    // While asleep with offloaded weights, the update lands in the host copy restored by wakeUp.
    if (this.offloaded) this.offloaded = { ...this.offloaded, ...tensors };
    else this.model!.importWeights(tensors, { strict: false });
    this.version = version;
  }

  /** The weights it serves now (HF names and shapes), asleep or awake. */
  exportWeights(): NamedTensors {
    if (this.offloaded) return this.offloaded;
    if (!this.model) throw new EngineError('CLOSED', 'BuiltinEngine is closed');
    return this.model.exportWeights();
  }

  /** The LoRA adapter it applies over its base, if any, asleep or awake. */
  exportAdapter(): LoraAdapter | undefined {
    if (this.offloaded) return this.offloadedAdapter;
    if (!this.model) throw new EngineError('CLOSED', 'BuiltinEngine is closed');
    return this.model.lora?.exportAdapter();
  }

  /** Aborts running requests, frees the KV cache and (for a model it loaded) offloads the weights. */
  async sleep(): Promise<void> {
    if (this.sleeping) return;
    this.sleeping = true;
    this.abortRunning();
    if (this.ownsModel && this.model) {
      await this.model.readToHost({ all: true });
      this.offloaded = this.model.exportWeights();
      this.offloadedAdapter = this.model.lora?.exportAdapter();
      this.model.dispose();
    }
  }

  async wakeUp(): Promise<void> {
    if (!this.sleeping) return;
    if (this.ownsModel && this.offloaded) {
      this.model = CausalLM.fromTensors(this.config, this.offloaded);
      if (this.offloadedAdapter) this.model.loadLora(this.offloadedAdapter);
      this.offloaded = undefined;
      this.offloadedAdapter = undefined;
    }
    this.sleeping = false;
    this.kick();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.abortRunning();
    const err = new EngineError('CLOSED', 'BuiltinEngine closed');
    this.pending.splice(0).forEach((a) => a.reject(err));
    this.closed = true;
    if (this.ownsModel) this.model?.dispose();
    this.model = undefined;
  }
}
