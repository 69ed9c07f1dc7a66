/**
 * The llama.cpp inference engine: an HF checkpoint converted to GGUF (`model/gguf`) and run by
 * `node-llama-cpp` (an optional dependency; its prebuilt CPU build, or a GPU build when asked).
 *
 * Every request holds one sequence of a shared llama.cpp context; the sequences' evaluations
 * issued in the same event-loop turn go into one `llama_decode` (node-llama-cpp batches them), so
 * concurrent requests are decoded together and a request that arrives joins at the next step.
 * llama.cpp returns, per step, the full next-token distribution at temperature 1 (flash attention
 * off and an f32 KV cache, so an f32 GGUF reproduces the TF.js model's logprobs to ~1e-6); the
 * token is sampled from it here with the same sampler as the builtin engine (`model/sampling.ts`),
 * so temperature, top-k/top-p, greedy, seeds, logprobs and top logprobs mean exactly what they
 * mean there; plain temperature sampling is left to llama.cpp's own sampler, which returns the
 * token and its logprob under the same distribution (`nativeSampling`).
 *
 * New weights are written into the mapped GGUF between decode steps, in place (the CPU build:
 * llama.cpp maps the file shared and computes from the mapping), or the model is reloaded from
 * the rewritten file (`weightSync: 'reload'`). In place is verified, not assumed: at load a probe
 * zeroes one matrix of each element type in the file and its output must change (ggml's CPU
 * backend copies some types into AMX or repacked buffers of its own on some CPUs; the engine
 * then reloads instead), and after every update the probe's output must change where the
 * rewrite changed bytes, or the update fails with `LLAMACPP_STALE` rather than label old
 * weights' tokens with the new version.
 * A LoRA policy's update (`{ kind: 'lora' }`) leaves the base alone: the adapter is written as a
 * GGUF LoRA adapter (`model/gguf/lora.ts`), loaded by llama.cpp and set on the context in place
 * of the previous one (`llama_set_adapters_lora`), on CPU and GPU builds alike.
 * Either way running requests then evaluate prompt + output again on the new weights before
 * their next token (in place: on their own sequence, its KV cache erased; by reload: on fresh
 * sequences), as the builtin engine's rows are prefilled again, and each token is labelled with
 * the version whose weights computed its distribution.
 *
 * Over 600 lines on purpose: one class whose sequences, decode steps and weight syncs share the
 * context's state and must be read together (as `engines/http/remote-engine.ts`).
 *
 * @module
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import type {
  Llama,
  LlamaContext,
  LlamaContextSequence,
  LlamaModel,
  ControlledEvaluateInputItem,
  Token,
} from 'node-llama-cpp';
import { readConfig, readWeights } from '../../model/checkpoint.ts';
import type { LlamaConfig } from '../../model/config.ts';
import {
  readGgufTensorBytes,
  rewriteGgufTensors,
  writeGguf,
  writeGgufTensorBytes,
  writeGgufLoraAdapter,
  type GgufDtype,
  type GgufLayout,
} from '../../model/gguf/index.ts';
import type { LoraAdapter } from '../../model/lora-adapter.ts';
import type { CausalLM } from '../../model/llama.ts';
import { sampleToken, seededRandom, topLogprobs } from '../../model/sampling.ts';
import type { NamedTensors } from '../../model/tensors.ts';
import { loadTokenizer, type ChatTokenizer } from '../../model/tokenizer.ts';
import type {
  GenerateRequest,
  GenerateResult,
  InferenceEngine,
  PauseOptions,
  StopReason,
  TopLogprobs,
  WeightUpdate,
} from '../types.ts';
import {
  appendToken,
  generateEach,
  generateOne,
  newLocalSample,
  resolveSample,
  sampleContext,
  type LocalSample,
} from '../local-sample.ts';
import { peerInstallCommand } from '../../runtime/own-files.ts';
import { LlamaCppError } from './errors.ts';
import { WeightsGate } from '../weights-gate.ts';

/** The llama.cpp engine's error for a request it cannot serve. */
const invalidRequest = (message: string) => new LlamaCppError('LLAMACPP_INVALID', message);

/** How new weights reach the loaded model. */
export type LlamaCppWeightSync = 'inplace' | 'reload';

/** Options of {@link LlamaCppEngine.create}. */
export interface LlamaCppEngineOptions {
  /** HF model directory (config, safetensors, tokenizer); or pass `model`. */
  modelPath?: string;
  /** An already loaded TF.js model whose weights and config to serve (tests, benchmarks). */
  model?: CausalLM;
  /** Needed for stop strings; loaded from `modelPath` when present there. */
  tokenizer?: ChatTokenizer;
  /** Element type of the GGUF's matrices. f32 reproduces the TF.js model's tokens. @default 'f32' */
  dtype?: GgufDtype;
  /** Where to write the GGUF; by default a temporary directory removed by `close`. */
  ggufPath?: string;
  /**
   * Sequences decoded together (requests beyond wait for one); lowered so that their KV cache
   * (`contextSize` tokens each, allocated up front) fits `kvCacheBytes`. @default 16
   */
  maxSequences?: number;
  /** Most bytes the KV cache of all sequences may take. @default 4 GiB */
  kvCacheBytes?: number;
  /** Tokens per sequence (prompt + output). @default min(max_position_embeddings, 4096) */
  contextSize?: number;
  /** CPU threads of llama.cpp; one per owned core is fastest on a loaded machine. @default 1 */
  threads?: number;
  /** `false`: the CPU build; `'auto'`, `'cuda'`, `'vulkan'`: a GPU build (weights then reload). @default false */
  gpu?: false | 'auto' | 'cuda' | 'vulkan';
  /**
   * `inplace` is refused where the mapped bytes are not what llama.cpp computes with: a GPU
   * build, or (found by a probe at load: see {@link LlamaCppEngine.inPlaceProblem}) a CPU whose
   * backend copies the matrices into a buffer of its own, or `mmap: false`. @default 'inplace'
   * where it works, else 'reload' (with one warning line when the probe decided)
   */
  weightSync?: LlamaCppWeightSync;
  /**
   * `false`: llama.cpp reads the GGUF into memory of its own instead of mapping it (in-place
   * updates then cannot reach it, so weights reload). @default true
   */
  mmap?: boolean;
  /** Where the engine's one-line warnings go. @default console.warn */
  onWarning?: (line: string) => void;
  /** Seed of the engine's sampling stream (requests without their own seed). @default 0 */
  seed?: number;
  /**
   * Plain temperature sampling (no top-k/top-p, no top logprobs, not greedy) is done by
   * llama.cpp's own sampler, which returns the token and its probability under the tempered
   * distribution (the same quantity as the builtin sampler's logprob) without sending the whole
   * distribution to JavaScript; seeded, but a different stream from the builtin engine's.
   * `false`: every request samples with the builtin sampler. @default true
   */
  nativeSampling?: boolean;
  /** Version of the initial weights. @default 0 */
  version?: number;
  /** Tokens that always end generation; defaults to the config's eos ids. */
  eosTokenIds?: number[];
}

interface Active extends LocalSample {
  /**
   * Set: llama.cpp samples natively with this seed (plain temperature sampling, no top-k/top-p,
   * no alternatives asked): the distribution stays in C++, only the token and its probability
   * come back. Unset: the full distribution comes back and the builtin sampler draws from it.
   */
  native?: number;
  done: boolean;
}

type NodeLlamaCpp = typeof import('node-llama-cpp');

let llamaModule: Promise<NodeLlamaCpp> | undefined;
const llamas = new Map<string, Promise<Llama>>();

/** Loads `node-llama-cpp`, failing with one line that says how to install it. */
async function nodeLlamaCpp(): Promise<NodeLlamaCpp> {
  llamaModule ??= import('node-llama-cpp').catch((e: unknown) => {
    llamaModule = undefined;
    throw new LlamaCppError(
      'LLAMACPP_UNAVAILABLE',
      `the llamacpp engine needs node-llama-cpp, an optional peer (~0.9 GB with its GPU builds): NODE_LLAMA_CPP_SKIP_DOWNLOAD=true ${peerInstallCommand('node-llama-cpp')}`,
      { cause: e },
    );
  });
  return llamaModule;
}

/** What a GPU build needs, for the one-line error when none runs here. */
const gpuBuilds =
  "node-llama-cpp's CUDA build (@node-llama-cpp/linux-x64-cuda, which npm installs with it) needs " +
  'libcudart.so.13 and libcublas.so.13 on LD_LIBRARY_PATH (a CUDA 13 PyTorch has them under ' +
  "its venv's site-packages/nvidia/); its Vulkan build needs a Vulkan GPU driver (software Vulkan such as " +
  'SwiftShader lacks the 16-bit storage llama.cpp needs)';

async function getLlamaFor(gpu: LlamaCppEngineOptions['gpu']): Promise<Llama> {
  const key = String(gpu ?? false);
  let p = llamas.get(key);
  if (!p) {
    p = nodeLlamaCpp().then((m) =>
      m
        .getLlama({
          build: 'never',
          gpu: gpu ?? false,
          logLevel: m.LlamaLogLevel.error,
          progressLogs: false,
        })
        .catch((e: unknown) => {
          if (gpu === 'cuda' || gpu === 'vulkan')
            throw new LlamaCppError('LLAMACPP_NO_GPU', `no ${gpu} build loads here: ${gpuBuilds}`, {
              cause: e,
            });
          throw e;
        }),
    );
    p.catch(() => llamas.delete(key));
    llamas.set(key, p);
  }
  return p;
}

/**
 * @example
 * const engine = await LlamaCppEngine.create({ modelPath: 'model/pretrained/rtjob-tiny-math' });
 * const r = await engine.generate({ inputIds, gconfig: { maxNewTokens: 32, temperature: 1 } });
 */
export class LlamaCppEngine implements InferenceEngine {
  readonly kind = 'llamacpp';
  readonly maxTopLogprobs = 20;
  readonly tokenizer: ChatTokenizer | undefined;
  /** Where the served GGUF is and how to rewrite it. */
  readonly layout: GgufLayout;
  weightSync: LlamaCppWeightSync;
  /**
   * Counters for benchmarks and tests. `lastSyncMs`: how long the last weight update held decoding
   * (rewrite or reload; for an adapter, its load and swap); `lastAdapterWriteMs`: writing the last
   * adapter's GGUF, done before decoding is held.
   */
  readonly stats = {
    generatedTokens: 0,
    decodeSteps: 0,
    syncs: 0,
    lastSyncMs: 0,
    lastAdapterWriteMs: 0,
    reprefills: 0,
    /** How long the last check that an in-place update reached llama.cpp took (a probe). */
    lastProbeMs: 0,
    /** How long the check at load that llama.cpp computes from the mapped file took. */
    loadCheckMs: 0,
  };
  private readonly llama: Llama;
  private model: LlamaModel | undefined;
  private context: LlamaContext | undefined;
  /** Bumped when the context is replaced (reload, sleep): sequences of older ones are gone. */
  private epoch = 0;
  /** Bumped by every weight update: a sequence's KV cache computed before it is stale. */
  private weightsGeneration = 0;
  /** Sequences of the current context that no request holds. */
  private freeSequences: LlamaContextSequence[] = [];
  /** In place: the sequence the probe runs on (its own: requests hold theirs), and its epoch. */
  private probeSequence: { seq: LlamaContextSequence; epoch: number } | undefined;
  /** In place: the probe's distribution on the weights llama.cpp computes with now. */
  private lastProbe: Float32Array | undefined;
  private readonly config: LlamaConfig;
  private readonly opts: LlamaCppEngineOptions;
  private readonly contextSize: number;
  /** Sequences decoded together (after the KV-cache budget). */
  readonly maxSequences: number;
  private readonly eos: number[];
  private readonly rand: () => number;
  private readonly nativeSampling: boolean;
  private readonly ownedDir: string | undefined;
  private readonly gate = new WeightsGate();
  private version: number;
  /** The LoRA adapter applied over the base GGUF (a LoRA policy), its file and llama.cpp handle. */
  private lora: { path: string; scale: number; handle: NativeLora } | undefined;
  private adapterFiles = 0;
  /** The version whose weights gave {@link lastProbe}. */
  private probedVersion: number;
  /** In place: weights were rewritten while asleep (no context to probe); checked at wake-up. */
  private unchecked = false;
  private running = new Set<Active>();
  private slotWaiters: (() => void)[] = [];
  private heldWaiters: (() => void)[] = [];
  private idleWaiters: (() => void)[] = [];
  private paused = false;
  private sleeping = false;
  private closed = false;

  private constructor(
    llama: Llama,
    model: LlamaModel,
    context: LlamaContext,
    init: {
      config: LlamaConfig;
      layout: GgufLayout;
      tokenizer: ChatTokenizer | undefined;
      ownedDir: string | undefined;
      contextSize: number;
      weightSync: LlamaCppWeightSync;
    },
    opts: LlamaCppEngineOptions,
  ) {
    this.llama = llama;
    this.model = model;
    this.context = context;
    this.config = init.config;
    this.layout = init.layout;
    this.tokenizer = init.tokenizer;
    this.ownedDir = init.ownedDir;
    this.contextSize = init.contextSize;
    this.weightSync = init.weightSync;
    this.opts = opts;
    this.maxSequences = opts.maxSequences ?? 16;
    this.rand = seededRandom(opts.seed ?? 0);
    this.nativeSampling = opts.nativeSampling ?? true;
    this.version = opts.version ?? 0;
    this.probedVersion = this.version;
    const eos = opts.eosTokenIds ?? init.config.eos_token_id ?? [];
    this.eos = Array.isArray(eos) ? eos : [eos];
  }

  /** Converts the checkpoint to GGUF, loads it into llama.cpp and returns a ready engine. */
  static async create(opts: LlamaCppEngineOptions): Promise<LlamaCppEngine> {
    const dtype = opts.dtype ?? 'f32';
    const blocker = inPlaceBlocker(opts);
    if (opts.weightSync === 'inplace' && blocker)
      throw new LlamaCppError('LLAMACPP_INVALID', `weightSync 'inplace': ${blocker}`);
    const weightSync = opts.weightSync ?? (blocker ? 'reload' : 'inplace');
    const llama = await getLlamaFor(opts.gpu);
    let config: LlamaConfig;
    let weights: NamedTensors;
    if (opts.model) {
      config = opts.model.config;
      weights = opts.model.exportWeights();
    } else if (opts.modelPath) {
      config = readConfig(opts.modelPath);
      weights = readWeights(opts.modelPath);
    } else
      throw new LlamaCppError('LLAMACPP_INVALID', 'LlamaCppEngine: modelPath or model is required');
    const ownedDir = opts.ggufPath ? undefined : mkdtempSync(join(tmpdir(), 'rtjob-gguf-'));
    const path = opts.ggufPath ?? join(ownedDir!, 'model.gguf');
    try {
      const layout = writeGguf(path, config, weights, { dtype, tokenizerDir: opts.modelPath });
      const contextSize = Math.min(
        opts.contextSize ?? Math.min(config.max_position_embeddings, 4096),
        config.max_position_embeddings,
      );
      // f32 keys and values (exactness): 2 × layers × kv heads × head_dim × 4 bytes per token.
      const perToken =
        2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 4;
      const fit = Math.floor((opts.kvCacheBytes ?? 4 * 2 ** 30) / (perToken * contextSize));
      opts = { ...opts, maxSequences: Math.max(1, Math.min(opts.maxSequences ?? 16, fit)) };
      const tokenizer =
        opts.tokenizer ?? (opts.modelPath ? tryTokenizer(opts.modelPath) : undefined);
      const model = await loadModel(llama, path, opts);
      if (opts.gpu && model.gpuLayers === 0) {
        // `gpu: 'auto'` falls back to the CPU build, and a Vulkan build with no usable device
        // offloads nothing: asked for a GPU, the engine would silently run on the CPU.
        await model.dispose();
        const devices = llama.gpu === false ? [] : await llama.getGpuDeviceNames();
        const found =
          llama.gpu === false
            ? 'only the CPU build loads'
            : `the ${llama.gpu} build found ${devices.length ? devices.join(', ') : 'no device'} and offloaded no layer`;
        throw new LlamaCppError(
          'LLAMACPP_NO_GPU',
          `gpu '${opts.gpu}': ${found} here; ${gpuBuilds}`,
        );
      }
      const context = await createContext(model, contextSize, opts, weightSync);
      const engine = new LlamaCppEngine(
        llama,
        model,
        context,
        { config, layout, tokenizer, ownedDir, contextSize, weightSync },
        opts,
      );
      if (weightSync === 'inplace') await engine.settleWeightSync(opts.weightSync === 'inplace');
      return engine;
    } catch (e) {
      if (ownedDir) rmSync(ownedDir, { recursive: true, force: true });
      throw e;
    }
  }

  getVersion(): number {
    return this.version;
  }

  /** Requests generating plus those waiting for a sequence. */
  get load(): { running: number; pending: number } {
    return { running: this.running.size, pending: this.slotWaiters.length };
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
    if (this.closed)
      return Promise.reject(new LlamaCppError('LLAMACPP_CLOSED', 'LlamaCppEngine is closed'));
    return new Promise<GenerateResult>((resolve, reject) => {
      const s = newLocalSample(
        req,
        seed,
        sample,
        {
          vocabSize: this.config.vocab_size,
          maxTokens: this.contextSize,
          maxTopLogprobs: this.maxTopLogprobs,
          tokenizer: this.tokenizer,
          eos: this.eos,
          rand: this.rand,
        },
        { resolve, reject },
      );
      if (typeof s === 'string') return reject(invalidRequest(s));
      const { sampling, topN } = s;
      const plain =
        this.nativeSampling &&
        !sampling.greedy &&
        sampling.temperature > 0 &&
        (sampling.topK <= 0 || sampling.topK >= this.config.vocab_size) &&
        sampling.topP >= 1 &&
        topN === 0;
      const a: Active = {
        ...s,
        ...(plain ? { native: Math.floor(s.rand() * 0x7fffffff) } : {}),
        done: false,
      };
      void this.run(a);
    });
  }

  /** Waits until `a` may start (not paused, not asleep, a sequence free) and counts it running. */
  private async admit(a: Active): Promise<void> {
    for (;;) {
      if (this.closed) throw new LlamaCppError('LLAMACPP_CLOSED', 'LlamaCppEngine closed');
      if (this.paused || this.sleeping) await new Promise<void>((r) => this.heldWaiters.push(r));
      else if (this.running.size >= this.maxSequences)
        await new Promise<void>((r) => this.slotWaiters.push(r));
      else {
        // Taken in the same turn as the check, so requests submitted together cannot overbook.
        this.running.add(a);
        return;
      }
    }
  }

  private async run(a: Active): Promise<void> {
    try {
      await this.admit(a);
    } catch (e) {
      a.reject(e as Error);
      return;
    }
    let seq: LlamaContextSequence | undefined;
    let seqEpoch = -1;
    /** The weights that computed `seq`'s KV cache. */
    let seqWeights = -1;
    /** Tokens of prompt + output already in `seq`. */
    let evaluated = 0;
    let gen: AsyncGenerator<{ token: Token; confidence: number }, void, void> | undefined;
    let ended = false;
    try {
      while (!a.done) {
        await this.gate.read();
        let next: { token: number; logprob: number } | Map<number, number> | undefined;
        /** The version of the weights this step computes with, which labels its token. */
        const version = this.version;
        try {
          if (a.done) break;
          if (!seq || seqEpoch !== this.epoch) {
            seq = await this.acquireSequence();
            seqEpoch = this.epoch;
            seqWeights = this.weightsGeneration;
            evaluated = 0;
            gen = undefined;
          } else if (seqWeights !== this.weightsGeneration) {
            // Weights rewritten in place since this KV cache was computed: prefill again.
            await gen?.return();
            gen = undefined;
            await seq.clearHistory();
            seqWeights = this.weightsGeneration;
            evaluated = 0;
            this.stats.reprefills++;
          }
          // node-llama-cpp brands token ids; rtjob's are plain numbers in [0, vocab).
          const all = sampleContext(a) as Token[];
          if (a.native !== undefined) {
            // One sampler for the whole generation (its seeded stream goes on from token to token).
            gen ??= seq.evaluateWithMetadata(
              all.slice(evaluated),
              { confidence: true },
              {
                temperature: a.sampling.temperature,
                topK: 0,
                topP: 1,
                minP: 0,
                seed: a.native + a.tokens.length,
                yieldEogToken: true,
              },
            );
            const r = await gen.next();
            if (!r.done) next = { token: r.value.token, logprob: Math.log(r.value.confidence) };
            else if (ended) {
              // Ended twice with no token between (the context is full): nothing more comes.
              this.finish(a, 'length');
            } else {
              // node-llama-cpp may end a generation after an end-of-generation token; go on.
              gen = undefined;
              ended = true;
            }
          } else {
            const input: ControlledEvaluateInputItem[] = all.slice(evaluated, -1);
            input.push([
              all[all.length - 1]!,
              {
                generateNext: {
                  probabilities: true,
                  options: { temperature: 1, topK: 0, topP: 1, minP: 0 },
                },
              },
            ]);
            const out = await seq.controlledEvaluate(input);
            next = out[out.length - 1]?.next.probabilities;
            if (!next)
              throw new LlamaCppError('LLAMACPP_INVALID', 'llama.cpp returned no distribution');
          }
          if (next) evaluated = all.length;
        } finally {
          this.gate.done();
        }
        if (a.done || !next) continue;
        ended = false;
        this.stats.decodeSteps++;
        if (next instanceof Map) this.step(a, next, version);
        else this.record(a, next.token, next.logprob, version);
      }
    } catch (e) {
      if (!a.done) {
        a.done = true;
        a.reject(e as Error);
      }
    } finally {
      if (gen) void gen.return().catch(() => undefined);
      this.running.delete(a);
      // A disposed sequence's id comes back to node-llama-cpp later; keep it for the next request.
      if (seq && seqEpoch === this.epoch && !seq.disposed) this.freeSequences.push(seq);
      this.slotWaiters.shift()?.();
      if (!this.running.size) this.idleWaiters.splice(0).forEach((f) => f());
    }
  }

  /** A sequence of the current context with an empty history. */
  private async acquireSequence(): Promise<LlamaContextSequence> {
    const reused = this.freeSequences.pop();
    if (!reused) return this.context!.getSequence();
    await reused.clearHistory();
    return reused;
  }

  /** Samples one token from llama.cpp's temperature-1 distribution and records it. */
  private step(a: Active, probs: Map<number, number>, version: number): void {
    const V = this.config.vocab_size;
    // log p is the logits up to a constant, so softmax(log p / T) is the tempered distribution.
    const logp = new Float32Array(V).fill(-Infinity);
    for (const [t, p] of probs) if (t < V) logp[t] = Math.log(p);
    const { token, logprob } = sampleToken(logp, 0, V, a.sampling, a.rand);
    const top = a.topN > 0 ? topLogprobs(logp, 0, V, a.sampling.temperature, a.topN) : undefined;
    this.record(a, token, logprob, version, top);
  }

  /** Appends a token the weights of `version` computed and finishes the request when it stops. */
  private record(
    a: Active,
    token: number,
    logprob: number,
    version: number,
    top?: TopLogprobs,
  ): void {
    this.stats.generatedTokens++;
    const reason = appendToken(a, token, logprob, version, this.tokenizer, top);
    if (reason) this.finish(a, reason);
  }

  private finish(a: Active, reason: StopReason): void {
    if (a.done) return;
    a.done = true;
    resolveSample(a, reason);
  }

  private abortRunning(): void {
    for (const a of this.running) this.finish(a, 'abort');
  }

  /** Waits until no request is generating. */
  private async idle(): Promise<void> {
    while (this.running.size) await new Promise<void>((r) => this.idleWaiters.push(r));
  }

  /**
   * Stops decoding. `abort` (default) returns running requests now with their partial output and
   * stop reason `abort`; `wait` lets them finish first. New requests wait for `resume`.
   */
  async pause(opts: PauseOptions = {}): Promise<void> {
    this.paused = true;
    if ((opts.mode ?? 'abort') === 'wait') {
      // Requests already admitted finish; only new ones are held.
      await this.idle();
    } else this.abortRunning();
  }

  async resume(): Promise<void> {
    this.paused = false;
    this.heldWaiters.splice(0).forEach((f) => f());
  }

  /**
   * Writes new weights into the served GGUF between decode steps and tags later tokens with
   * `version`. In place, the loaded model computes with them at once; with `reload`, the model is
   * loaded again. Requests in flight are not waited for: before their next token they evaluate
   * prompt + output so far again on the new weights (their KV cache of the old weights erased),
   * so tokens before the update carry the old version and those after it the new one, each
   * sampled from that version's distribution. Call `pause` first where a request must not span
   * two versions.
   */
  async updateWeights(update: WeightUpdate, version: number): Promise<void> {
    if (this.closed) throw new LlamaCppError('LLAMACPP_CLOSED', 'LlamaCppEngine is closed');
    if (update.kind === 'lora') return this.applyAdapter(update.adapter, version);
    const tensors = update.kind === 'tensors' ? update.tensors : readWeights(update.path);
    await this.gate.write();
    const t0 = performance.now();
    try {
      // Before the rewrite: one that fails part way has still changed some bytes.
      this.weightsGeneration++;
      const { changed } = rewriteGgufTensors(this.layout, tensors, {
        compare: (name) => this.weightSync === 'inplace' && this.probeSees(name),
      });
      // Full weights are the whole policy: an adapter applied before would add to them.
      await this.swapAdapter(undefined);
      if (this.weightSync === 'reload' && this.model) await this.reload();
      else if (this.context) await this.checkArrived(changed, version);
      else this.unchecked ||= changed !== undefined;
      this.version = version;
    } finally {
      this.stats.syncs++;
      this.stats.lastSyncMs = performance.now() - t0;
      this.gate.done();
    }
  }

  /**
   * A LoRA policy's update: the adapter is written as a GGUF LoRA adapter beside the base GGUF
   * (before decoding is held), then, between decode steps, loaded by llama.cpp and set on the
   * context in place of the previous adapter, which is freed. The base stays as it is, mapped or
   * on the GPU, so this works the same on every build and never reloads the model.
   */
  private async applyAdapter(adapter: LoraAdapter, version: number): Promise<void> {
    const w0 = performance.now();
    const path = `${this.layout.path}.lora-${++this.adapterFiles}.gguf`;
    writeGgufLoraAdapter(path, this.config, adapter);
    this.stats.lastAdapterWriteMs = performance.now() - w0;
    await this.gate.write();
    const t0 = performance.now();
    try {
      this.weightsGeneration++;
      // PEFT's alpha 0 is no update; llama.cpp would read it as "scale 1, no alpha".
      await this.swapAdapter({ path, scale: adapter.config.alpha === 0 ? 0 : 1 });
      this.version = version;
    } catch (e) {
      rmSync(path, { force: true });
      throw e;
    } finally {
      this.stats.syncs++;
      this.stats.lastSyncMs = performance.now() - t0;
      this.gate.done();
    }
  }

  /**
   * Loads the adapter file `next` (none: no adapter), sets it on the context, then frees the
   * adapter it replaces and removes that one's file. The adapter's file is kept while it is
   * applied: a reload of the model loads it again.
   */
  private async swapAdapter(next: { path: string; scale: number } | undefined): Promise<void> {
    const old = this.lora;
    if (!next && !old) return;
    this.lora = next && { ...next, handle: await loraApi(this.model!).load(next.path) };
    this.setAdapterOnContext();
    if (old) {
      await loraApi(this.model!).free(old.handle, old.path);
      rmSync(old.path, { force: true });
    }
  }

  /** Sets the current adapter (or none) on the context, when there is one. */
  private setAdapterOnContext(): void {
    if (!this.context) return;
    const l = this.lora;
    contextLoras(this.context).setLoras(l ? [l.handle] : [], l ? [l.scale] : []);
  }

  private async reload(): Promise<void> {
    await this.context?.dispose();
    await this.model?.dispose();
    this.epoch++;
    this.freeSequences = [];
    this.context = undefined;
    this.model = await loadModel(this.llama, this.layout.path, this.opts);
    // The model's adapters went with it.
    if (this.lora) this.lora.handle = await loraApi(this.model).load(this.lora.path);
    this.context = await createContext(this.model, this.contextSize, this.opts, this.weightSync);
    this.setAdapterOnContext();
  }

  /**
   * Decides an in-place engine's weight sync at load: where {@link inPlaceProblem} finds that
   * llama.cpp does not compute from the mapped file, an explicit `inplace` is refused (the
   * engine closed) and a defaulted one becomes `reload` with one warning line.
   */
  private async settleWeightSync(explicit: boolean): Promise<void> {
    const t0 = performance.now();
    const problem = await this.inPlaceProblem();
    this.stats.loadCheckMs = performance.now() - t0;
    if (!problem) return;
    if (explicit) {
      await this.close();
      throw new LlamaCppError('LLAMACPP_INVALID', `weightSync 'inplace': ${problem}`);
    }
    this.weightSync = 'reload';
    this.lastProbe = undefined;
    this.probeSequence = undefined;
    (this.opts.onWarning ?? console.warn)(
      `llamacpp: weights reload after each update (${problem}; an update in place would not reach it)`,
    );
  }

  /**
   * Asks llama.cpp whether it computes from the mapped GGUF: for each element type among the
   * matrices, one matrix is zeroed in the file, the probe's distribution must change, and the
   * matrix is restored. ggml's CPU backend may copy matrices into a buffer of its own at load
   * (AMX tiles on Xeons with `amx_int8`, the repacked layouts of `ggml-cpu/repack.cpp`, KleidiAI
   * on ARM), by element type and CPU, so the answer is found, not predicted.
   *
   * @returns why bytes written in place would not reach llama.cpp, or undefined when they do
   */
  async inPlaceProblem(): Promise<string | undefined> {
    await this.gate.write();
    try {
      const base = await this.probe();
      const tried = new Set<string>();
      for (const p of this.layout.tensors.values()) {
        const dtype = p.info.dtype;
        if (p.info.shape.length !== 2 || tried.has(dtype) || !this.probeSees(p.hfName)) continue;
        tried.add(dtype);
        const saved = readGgufTensorBytes(this.layout, p.hfName);
        let zeroed: Float32Array;
        try {
          writeGgufTensorBytes(this.layout, p.hfName, new Uint8Array(saved.length));
          zeroed = await this.probe();
        } finally {
          writeGgufTensorBytes(this.layout, p.hfName, saved);
        }
        if (sameValues(zeroed, base))
          return `llama.cpp computes the ${dtype} matrices from a copy of its own, not the mapped GGUF (${p.hfName} zeroed in the file changed nothing: AMX or repacked buffers on this CPU, or mmap off)`;
      }
      const again = await this.probe();
      if (!sameValues(again, base))
        return 'the probe gave another distribution on the same weights (llama.cpp is not deterministic here)';
      this.lastProbe = base;
      return undefined;
    } finally {
      this.gate.done();
    }
  }

  /**
   * After an in-place rewrite that changed bytes the probe sees (`changed`), the probe's
   * distribution must change too; otherwise llama.cpp still computes with the old weights and
   * the engine refuses to label its tokens with `version`.
   */
  private async checkArrived(changed: string | undefined, version: number): Promise<void> {
    const t0 = performance.now();
    const now = await this.probe();
    this.stats.lastProbeMs = performance.now() - t0;
    const stale = changed !== undefined && this.lastProbe && sameValues(now, this.lastProbe);
    if (stale) {
      this.version = this.probedVersion;
      throw new LlamaCppError(
        'LLAMACPP_STALE',
        `weights of version ${version} did not reach llama.cpp (${changed} changed in the mapped GGUF, its output did not); still serving version ${this.probedVersion}: use weightSync 'reload'`,
      );
    }
    this.lastProbe = now;
    this.probedVersion = version;
  }

  /**
   * Whether the probe's output depends on a tensor: every weight but the rows of tokens the
   * probe does not use, i.e. all but an untied input embedding.
   */
  private probeSees(hfName: string): boolean {
    return this.config.tie_word_embeddings || !hfName.endsWith('embed_tokens.weight');
  }

  /**
   * The next-token distribution after a fixed 8-token prompt, on a sequence of its own (the
   * context has one beyond `maxSequences` for it), evaluated from scratch. Call with decoding
   * held.
   */
  private async probe(): Promise<Float32Array> {
    const V = this.config.vocab_size;
    if (this.probeSequence?.epoch !== this.epoch)
      this.probeSequence = { seq: this.context!.getSequence(), epoch: this.epoch };
    const seq = this.probeSequence.seq;
    await seq.clearHistory();
    const ids = Array.from({ length: 8 }, (_, i) => ((i * 7919 + 1) % V) as Token);
    const input: ControlledEvaluateInputItem[] = ids.slice(0, -1);
    input.push([
      ids[ids.length - 1]!,
      {
        generateNext: {
          probabilities: true,
          options: { temperature: 1, topK: 0, topP: 1, minP: 0 },
        },
      },
    ]);
    const out = await seq.controlledEvaluate(input);
    const probs = out[out.length - 1]?.next.probabilities;
    if (!probs) throw new LlamaCppError('LLAMACPP_INVALID', 'llama.cpp returned no distribution');
    const dist = new Float32Array(V);
    for (const [t, p] of probs) if (t < V) dist[t] = p;
    await seq.clearHistory();
    return dist;
  }

  /** Aborts running requests and frees the KV cache; the weights stay mapped. */
  async sleep(): Promise<void> {
    if (this.sleeping) return;
    this.sleeping = true;
    this.abortRunning();
    await this.gate.write();
    try {
      await this.context?.dispose();
      this.context = undefined;
      this.freeSequences = [];
      this.epoch++;
    } finally {
      this.gate.done();
    }
  }

  async wakeUp(): Promise<void> {
    if (!this.sleeping) return;
    this.context = await createContext(this.model!, this.contextSize, this.opts, this.weightSync);
    this.setAdapterOnContext();
    try {
      if (this.unchecked) {
        // Weights were rewritten in place while asleep: checked before anything decodes (a stale
        // update fails here and the engine serves the old version under its own label).
        this.unchecked = false;
        await this.checkArrived('(while asleep)', this.version);
      }
    } finally {
      this.sleeping = false;
      this.heldWaiters.splice(0).forEach((f) => f());
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.abortRunning();
    this.heldWaiters.splice(0).forEach((f) => f());
    this.slotWaiters.splice(0).forEach((f) => f());
    await this.gate.write();
    try {
      await this.context?.dispose();
      await this.model?.dispose();
    } finally {
      this.context = undefined;
      this.model = undefined;
      this.gate.done();
      if (this.lora) rmSync(this.lora.path, { force: true });
      this.lora = undefined;
      if (this.ownedDir) rmSync(this.ownedDir, { recursive: true, force: true });
    }
    await yieldToEventLoop();
  }
}

/**
 * Why bytes written into the mapped GGUF cannot reach what llama.cpp computes with, known before
 * loading (a GPU build copies the weights to the device); undefined where only a probe can tell
 * (see {@link LlamaCppEngine.inPlaceProblem}).
 */
function inPlaceBlocker(opts: LlamaCppEngineOptions): string | undefined {
  if ((opts.gpu ?? false) !== false) return 'a GPU build copies the weights to the device at load';
  return undefined;
}

function sameValues(a: Float32Array, b: Float32Array): boolean {
  return a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
}

function tryTokenizer(dir: string): ChatTokenizer | undefined {
  try {
    return loadTokenizer(dir);
  } catch {
    return undefined;
  }
}

async function loadModel(
  llama: Llama,
  path: string,
  opts: LlamaCppEngineOptions,
): Promise<LlamaModel> {
  // CPU: keep the weights in the shared mapping of the file, which in-place updates rewrite.
  return llama.loadModel({
    modelPath: path,
    gpuLayers: (opts.gpu ?? false) === false ? 0 : 'max',
    useMmap: opts.mmap ?? true,
  });
}

/** A LoRA adapter llama.cpp loaded (node-llama-cpp's `AddonModelLora`). */
interface NativeLora {
  dispose(): Promise<void>;
}

/**
 * node-llama-cpp@3.21.1 applies adapters only when a context is created (`createContext({ lora:
 * { adapters: [{ filePath, scale }] } })`) and frees them only with the model; a new context
 * per weight update would reallocate the KV cache of every sequence and drop them all. So the
 * engine uses what that option runs underneath: `LlamaModel._getOrLoadLora(path)`
 * (`llama_adapter_lora_init`, cached per path in `_loraAdapters`) and the native context's
 * `setLoras(adapters, scales)` (`llama_set_adapters_lora`, which swaps the adapters of a live
 * context), and frees a replaced adapter (`llama_adapter_lora_free`). Not public API: checked
 * here, failing with one line on another version.
 */
function loraApi(model: LlamaModel): {
  load(path: string): Promise<NativeLora>;
  free(handle: NativeLora, path: string): Promise<void>;
} {
  const m = model as unknown as {
    _getOrLoadLora?: (path: string) => Promise<NativeLora>;
    _loraAdapters?: Map<string, NativeLora>;
  };
  if (typeof m._getOrLoadLora !== 'function' || !(m._loraAdapters instanceof Map))
    throw new LlamaCppError(
      'LLAMACPP_UNAVAILABLE',
      'node-llama-cpp: the model has no _getOrLoadLora/_loraAdapters (version other than 3.21.1?)',
    );
  return {
    load: (path) => m._getOrLoadLora!.call(model, path),
    async free(handle, path) {
      for (const [k, v] of m._loraAdapters!)
        if (v === handle || k === path) m._loraAdapters!.delete(k);
      await handle.dispose();
    },
  };
}

/** The native context's adapter setter (see {@link loraApi}). */
function contextLoras(context: LlamaContext): {
  setLoras(adapters: NativeLora[], scales: number[]): void;
} {
  const native = (context as unknown as { _ctx?: { setLoras?: unknown } })._ctx;
  if (!native || typeof native.setLoras !== 'function')
    throw new LlamaCppError(
      'LLAMACPP_UNAVAILABLE',
      'node-llama-cpp: its native context has no setLoras (version other than 3.21.1?)',
    );
  return native as { setLoras(adapters: NativeLora[], scales: number[]): void };
}

/** The part of node-llama-cpp's native context that decodes a batch and samples from it. */
interface NativeContext {
  decodeBatch(): Promise<void>;
  sampleToken(...args: unknown[]): Promise<unknown>;
}

/**
 * Lets the first sampling after each decode run alone. llama.cpp hands a batch's outputs back
 * in its own order when sequences have separate KV streams and records the swaps that restore
 * the caller's order; the first read of the logits applies them, in place and without a lock
 * (`llama_context::output_reorder`). node-llama-cpp samples every sequence of a batch on its own
 * worker thread, so two first reads could apply the swaps at once and some sequences then sampled
 * from another sequence's logits (measured: 12–39 of 64 requests in about one decode step in
 * five went wrong, the trainer seeing log-probabilities off by up to 15). Later reads only
 * read, so they run in parallel once the first is done.
 */
function serializeFirstSampling(context: LlamaContext): void {
  // node-llama-cpp@3.21.1's native context (`LlamaContext._ctx`, not public API).
  const native = (context as unknown as { _ctx?: NativeContext })._ctx;
  if (
    !native ||
    typeof native.decodeBatch !== 'function' ||
    typeof native.sampleToken !== 'function'
  )
    throw new LlamaCppError(
      'LLAMACPP_UNAVAILABLE',
      'node-llama-cpp: its native context has no decodeBatch/sampleToken (version other than 3.21.1?)',
    );
  const decodeBatch = native.decodeBatch.bind(native);
  const sampleToken = native.sampleToken.bind(native);
  /** Undefined: no sampling yet since the last decode; else the first one, settled or not. */
  let first: Promise<unknown> | undefined;
  // The native methods are read-only on the prototype: shadow them on this instance.
  Object.defineProperty(native, 'decodeBatch', {
    value: async () => {
      first = undefined;
      await decodeBatch();
      first = undefined;
    },
  });
  Object.defineProperty(native, 'sampleToken', {
    value: (...args: unknown[]) => {
      if (first) return first.then(() => sampleToken(...args));
      const p = sampleToken(...args);
      first = p.catch(() => undefined);
      return p;
    },
  });
}

async function createContext(
  model: LlamaModel,
  contextSize: number,
  opts: LlamaCppEngineOptions,
  weightSync: LlamaCppWeightSync,
): Promise<LlamaContext> {
  const context = await model.createContext({
    contextSize,
    // In place: one more for the probe that checks each update reached llama.cpp.
    sequences: (opts.maxSequences ?? 16) + (weightSync === 'inplace' ? 1 : 0),
    threads: opts.threads ?? 1,
    // Exactness: flash attention and an f16 KV cache each move logprobs by ~1e-3 on random models.
    flashAttention: false,
    experimentalKvCacheKeyType: 'F32',
    experimentalKvCacheValueType: 'F32',
  });
  serializeFirstSampling(context);
  return context;
}
