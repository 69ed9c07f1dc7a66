/**
 * Token generators for the fake inference servers. A fake server does the HTTP protocol; a
 * generator decides the tokens and their logprobs. Two are here: a small deterministic sampler
 * (a fixed pseudo-random bigram model whose "weights" are a seed read from the checkpoint
 * directory), and an adapter that generates with any {@link InferenceEngine} — plug the builtin
 * TF.js engine in and a fake server generates with a real, trainable model.
 *
 * @module
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { seededRandom } from '../../model/prng.ts';

import type { GenerationConfig, InferenceEngine } from '../../engines/types.ts';
import type { LoraAdapter } from '../../model/lora-adapter.ts';

/** What a fake server asks a generator for: one sample. */
export interface SamplingRequest {
  inputIds: number[];
  maxNewTokens: number;
  minNewTokens: number;
  /** 0 means greedy. */
  temperature: number;
  topP: number;
  /** 0 or less: off. */
  topK: number;
  stopTokenIds: number[];
  stop: string[];
  ignoreEos: boolean;
  seed?: number;
  /** Also report this many most likely tokens at each position (SGLang `top_logprobs_num`, vLLM `logprobs`). */
  topLogprobs?: number;
  /** The LoRA adapter the request named (SGLang `lora_path`, vLLM `model`), as the server loaded it. */
  adapter?: { name: string; lora: LoraAdapter };
  /** Aborting it ends the sample now with finish `abort` and the tokens so far. */
  signal: AbortSignal;
  /** Awaited before every token; a server paused in place holds it. */
  hold: () => Promise<void>;
  /** Called after every token with the sample so far (streamed answers, progress tests wait on). */
  onToken: (soFar: Readonly<GeneratedSequence>) => void;
}

/** The most likely tokens at one position, most likely first; logprobs as in {@link GeneratedSequence}. */
export interface Alternatives {
  ids: number[];
  logprobs: number[];
  rawLogprobs?: number[];
}

/** One generated sample. `logprobs` are after temperature; `rawLogprobs` before it, when known. */
export interface GeneratedSequence {
  tokens: number[];
  logprobs: number[];
  rawLogprobs?: number[];
  /** With `topLogprobs`: the alternatives at each position. */
  top?: Alternatives[];
  finish: 'stop' | 'length' | 'abort';
  /** The stop token id or stop string that ended it. */
  matched?: number | string;
}

/** What a fake server generates with. */
export interface TokenGenerator {
  readonly eosTokenId: number;
  decode(ids: number[]): string;
  generate(req: SamplingRequest): Promise<GeneratedSequence>;
  /** Loads the checkpoint directory at `path`; throws when it does not exist. */
  loadWeights(path: string, version: number): Promise<void>;
  /** Prepares generation under the adapter `name` (called when the server loads it). */
  loadAdapter?(name: string, lora: LoraAdapter): Promise<void>;
  /** Frees what {@link loadAdapter} prepared (called once no request uses it). */
  unloadAdapter?(name: string): Promise<void>;
  /** For generators that cannot abort one request alone: abort all in flight and hold new ones. */
  abortAll?(): Promise<void>;
  /** Undo `abortAll`. */
  resumeAll?(): Promise<void>;
}

const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789 .,!?+-=*/()';

/** Options of {@link DeterministicGenerator}. */
export interface DeterministicGeneratorOptions {
  /** @default 64 */
  vocabSize?: number;
  /** @default 1 */
  eosTokenId?: number;
  /** Simulated compute per token. @default 0 */
  tokenDelayMs?: number;
  /** Spread of the logits; larger is more peaked. @default 4 */
  logitScale?: number;
  /** The initial "weights". @default 0 */
  weightsSeed?: number;
}

/**
 * What a LoRA adapter does to the {@link DeterministicGenerator}'s "weights": its seed is XORed
 * with this hash of the adapter's alpha, rank and tensors (names and bytes), so every adapter
 * changes the distribution and a test can compute what a request under it must give.
 */
export function adapterSeed(a: LoraAdapter): number {
  let h = hashString(`${a.config.r}/${a.config.alpha}`);
  for (const name of Object.keys(a.tensors).sort()) {
    const t = a.tensors[name]!;
    h = Math.imul(h ^ hashString(name), 0x01000193);
    const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    for (const b of bytes) h = Math.imul(h ^ b, 0x01000193);
  }
  return fmix32(h);
}

/**
 * A bigram model with pseudo-random logits fixed by `(previous two tokens, weights seed)`.
 * Sampling follows SGLang/vLLM: temperature, then top-k, then top-p; logprobs are reported both
 * after temperature (before truncation) and raw. Checkpoint directories hold the seed in
 * `fake-weights.json` (`{"seed": 7}`); any other existing directory gets a seed from its path.
 * A request under a LoRA adapter uses the seed XOR {@link adapterSeed}.
 */
export class DeterministicGenerator implements TokenGenerator {
  readonly vocabSize: number;
  readonly eosTokenId: number;
  private readonly tokenDelayMs: number;
  private readonly logitScale: number;
  private weightsSeed: number;
  private stream: () => number;

  constructor(opts: DeterministicGeneratorOptions = {}) {
    this.vocabSize = opts.vocabSize ?? 64;
    this.eosTokenId = opts.eosTokenId ?? 1;
    this.tokenDelayMs = opts.tokenDelayMs ?? 0;
    this.logitScale = opts.logitScale ?? 4;
    this.weightsSeed = opts.weightsSeed ?? 0;
    this.stream = seededRandom(0x5eed);
  }

  decode(ids: number[]): string {
    return ids.map((t) => (t === this.eosTokenId ? '' : alphabet[t % alphabet.length])).join('');
  }

  async loadWeights(path: string): Promise<void> {
    if (!existsSync(path) || !statSync(path).isDirectory()) {
      throw new Error(`model path ${path} is not a directory`);
    }
    const file = join(path, 'fake-weights.json');
    this.weightsSeed = existsSync(file)
      ? Number((JSON.parse(readFileSync(file, 'utf8')) as { seed: number }).seed)
      : hashString(path);
  }

  /** The seed a request under `adapter` (none: the base) generates with. */
  seedFor(adapter?: LoraAdapter): number {
    return adapter ? this.weightsSeed ^ adapterSeed(adapter) : this.weightsSeed;
  }

  /** Log-softmax of the next-token logits after `context` (exposed for tests). */
  logits(context: number[], seed = this.weightsSeed): Float64Array {
    const a = context.at(-1) ?? 0;
    const b = context.at(-2) ?? 0;
    const out = new Float64Array(this.vocabSize);
    for (let j = 0; j < this.vocabSize; j++) {
      const h = fmix32(
        Math.imul(a + 1, 0x9e3779b1) ^
          Math.imul(b + 7, 0x85ebca6b) ^
          Math.imul(j + 13, 0xc2b2ae35) ^
          seed,
      );
      out[j] = ((h >>> 0) / 0xffffffff) * 2 * this.logitScale - this.logitScale;
    }
    return out;
  }

  async generate(req: SamplingRequest): Promise<GeneratedSequence> {
    const rand = req.seed === undefined ? this.stream : seededRandom(req.seed);
    const context = req.inputIds.slice();
    const out: GeneratedSequence = {
      tokens: [],
      logprobs: [],
      rawLogprobs: [],
      ...(req.topLogprobs ? { top: [] } : {}),
      finish: 'length',
    };
    const ends = new Set(req.stopTokenIds);
    if (!req.ignoreEos) ends.add(this.eosTokenId);
    const weights = this.seedFor(req.adapter?.lora);
    while (out.tokens.length < req.maxNewTokens) {
      await req.hold();
      if (this.tokenDelayMs > 0) await sleep(this.tokenDelayMs);
      else if (out.tokens.length % 16 === 15) await new Promise((r) => setImmediate(r));
      if (req.signal.aborted) return { ...out, finish: 'abort' };
      const logits = this.logits(context, weights);
      if (out.tokens.length < req.minNewTokens)
        for (const e of ends) if (e < logits.length) logits[e] = -Infinity;
      const raw = logSoftmax(logits, 1);
      const greedy = req.temperature === 0;
      const tempered = greedy ? raw : logSoftmax(logits, req.temperature);
      const tok = greedy ? argmax(raw) : sampleFrom(tempered, req.topK, req.topP, rand);
      out.tokens.push(tok);
      out.logprobs.push(tempered[tok]!);
      out.rawLogprobs!.push(raw[tok]!);
      if (out.top) {
        // Temperature keeps the order, so the raw and the tempered top-k are the same tokens.
        const ids = Array.from(raw.keys())
          .sort((x, y) => raw[y]! - raw[x]!)
          .slice(0, req.topLogprobs);
        out.top.push({
          ids,
          logprobs: ids.map((i) => tempered[i]!),
          rawLogprobs: ids.map((i) => raw[i]!),
        });
      }
      context.push(tok);
      req.onToken(out);
      if (ends.has(tok)) return { ...out, finish: 'stop', matched: tok };
      const text = this.decode(out.tokens);
      const s = req.stop.find((x) => x.length > 0 && text.endsWith(x));
      if (s !== undefined) return { ...out, finish: 'stop', matched: s };
    }
    return out;
  }
}

/**
 * A generator backed by an {@link InferenceEngine} (for example the builtin TF.js engine), so
 * that a fake server generates with a real model and training against it learns. The engine
 * cannot cancel one request, so aborts go through `abortAll` (engine `pause({ mode: 'abort' })`).
 */
export class EngineGenerator implements TokenGenerator {
  readonly eosTokenId: number;
  private readonly engine: InferenceEngine;
  private readonly decodeFn: (ids: number[]) => string;
  private readonly adapterEngine?: (lora: LoraAdapter) => Promise<InferenceEngine>;
  private readonly adapters = new Map<string, InferenceEngine>();

  /**
   * `adapterEngine` builds the engine a LoRA adapter's requests run on (e.g. one on the base
   * merged with it, `mergeLoraAdapter`); without it the server cannot serve adapters.
   */
  constructor(
    engine: InferenceEngine,
    opts: {
      eosTokenId: number;
      decode: (ids: number[]) => string;
      adapterEngine?: (lora: LoraAdapter) => Promise<InferenceEngine>;
    },
  ) {
    this.engine = engine;
    this.eosTokenId = opts.eosTokenId;
    this.decodeFn = opts.decode;
    this.adapterEngine = opts.adapterEngine;
  }

  async loadAdapter(name: string, lora: LoraAdapter): Promise<void> {
    if (!this.adapterEngine) throw new Error('this generator serves no LoRA adapters');
    this.adapters.set(name, await this.adapterEngine(lora));
  }

  async unloadAdapter(name: string): Promise<void> {
    await this.adapters.get(name)?.close();
    this.adapters.delete(name);
  }

  decode(ids: number[]): string {
    return this.decodeFn(ids);
  }

  async generate(req: SamplingRequest): Promise<GeneratedSequence> {
    await req.hold();
    const gconfig: GenerationConfig = {
      maxNewTokens: req.maxNewTokens,
      minNewTokens: req.minNewTokens,
      greedy: req.temperature === 0,
      temperature: req.temperature === 0 ? 1 : req.temperature,
      topP: req.topP,
      topK: req.topK,
      stopTokenIds: req.stopTokenIds,
      stop: req.stop,
      ...(req.seed === undefined ? {} : { seed: req.seed }),
      ...(req.topLogprobs ? { topLogprobs: req.topLogprobs } : {}),
    };
    const engine = req.adapter ? this.adapters.get(req.adapter.name) : this.engine;
    if (!engine) throw new Error(`adapter ${req.adapter?.name} is not loaded`);
    const r = await engine.generate({ inputIds: req.inputIds, gconfig });
    const top = r.outputTopLogprobs?.map((t) => ({ ids: t.ids, logprobs: t.logprobs }));
    // The engine answers whole: its tokens are told (and streamed) in one go after it.
    for (let i = 1; i <= r.outputTokens.length; i++) {
      req.onToken({
        tokens: r.outputTokens.slice(0, i),
        logprobs: r.outputLogprobs.slice(0, i),
        ...(top ? { top: top.slice(0, i) } : {}),
        finish: 'length',
      });
    }
    const last = r.outputTokens.at(-1);
    return {
      tokens: r.outputTokens,
      logprobs: r.outputLogprobs,
      ...(top ? { top } : {}),
      finish: r.stopReason,
      ...(r.stopReason === 'stop' && last !== undefined ? { matched: last } : {}),
    };
  }

  async loadWeights(path: string, version: number): Promise<void> {
    await this.engine.updateWeights({ kind: 'disk', path }, version);
  }

  async abortAll(): Promise<void> {
    await Promise.all(
      [this.engine, ...this.adapters.values()].map((e) => e.pause({ mode: 'abort' })),
    );
  }

  async resumeAll(): Promise<void> {
    await Promise.all([this.engine, ...this.adapters.values()].map((e) => e.resume()));
  }
}

function logSoftmax(logits: Float64Array, temperature: number): Float64Array {
  let max = -Infinity;
  for (const l of logits) if (l / temperature > max) max = l / temperature;
  let sum = 0;
  for (const l of logits) sum += Math.exp(l / temperature - max);
  const lse = max + Math.log(sum);
  return logits.map((l) => l / temperature - lse);
}

function argmax(xs: Float64Array): number {
  let best = 0;
  for (let i = 1; i < xs.length; i++) if (xs[i]! > xs[best]!) best = i;
  return best;
}

/** Top-k, then top-p over the tempered distribution, renormalised, then one draw. */
function sampleFrom(logp: Float64Array, topK: number, topP: number, rand: () => number): number {
  const order = Array.from(logp.keys()).sort((x, y) => logp[y]! - logp[x]!);
  let keep = topK > 0 ? order.slice(0, topK) : order;
  if (topP < 1) {
    let mass = 0;
    const kept: number[] = [];
    for (const i of keep) {
      kept.push(i);
      mass += Math.exp(logp[i]!);
      if (mass >= topP) break;
    }
    keep = kept;
  }
  let total = 0;
  for (const i of keep) total += Math.exp(logp[i]!);
  let u = rand() * total;
  for (const i of keep) {
    u -= Math.exp(logp[i]!);
    if (u <= 0) return i;
  }
  return keep.at(-1)!;
}

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return fmix32(h);
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
