/**
 * The contract every inference engine meets: the builtin TF.js engine, and the SGLang and vLLM
 * HTTP proxies. Rollout actors and agent workflows speak only this interface, in token ids.
 *
 * @module
 */
import type { LoraAdapter } from '../model/lora-adapter.ts';
import type { NamedTensors } from '../model/tensors.ts';

/** Sampling settings for one request. Field names follow AReaL's `GenerationHyperparameters`. */
export interface GenerationConfig {
  /** Maximum number of tokens to generate. @default 256 */
  maxNewTokens?: number;
  /** Minimum number of tokens before a stop token may end the sequence. @default 0 */
  minNewTokens?: number;
  /** Softmax temperature; logprobs are of this tempered distribution. @default 1 */
  temperature?: number;
  /** Nucleus sampling mass. @default 1 */
  topP?: number;
  /** Keep only the k most likely tokens; 0 or less disables. @default 0 */
  topK?: number;
  /** Take the argmax (temperature is then ignored for sampling). @default false */
  greedy?: boolean;
  /** Token ids that end generation (the engine adds the model's eos). @default [] */
  stopTokenIds?: number[];
  /** Strings that end generation when the decoded output ends with one. @default [] */
  stop?: string[];
  /** Number of samples; `generate` requires 1, `generateN` takes any. @default 1 */
  n?: number;
  /** Seed for this request's sampler; unset means the engine's stream. */
  seed?: number;
  /**
   * Also return, for every generated token, this many most likely tokens with their logprobs
   * (same tempered distribution as `outputLogprobs`). Only engines whose `maxTopLogprobs` is at
   * least this take it; the others refuse it. @default 0
   */
  topLogprobs?: number;
}

/** The most likely tokens at one position, most likely first. */
export interface TopLogprobs {
  ids: number[];
  logprobs: number[];
}

/** New tokens of one sample, as {@link GenerateRequest.onTokens} is told of them. */
export interface TokenDelta {
  /** Which sample: 0 for `generate`, i for the i-th of `generateN`. */
  sample: number;
  tokens: number[];
  /** Logprob of each token, as in {@link GenerateResult.outputLogprobs}. */
  logprobs: number[];
  /** With `gconfig.topLogprobs`: the alternatives at each token's position. */
  top?: TopLogprobs[];
}

/** One generation request. */
export interface GenerateRequest {
  /** Request id; requests with the same id are routed to the same server (prefix cache). */
  rid?: string;
  /** Prompt token ids (for a continued request: prompt + partial output so far). */
  inputIds: number[];
  gconfig?: GenerationConfig;
  /**
   * Told of each sample's new tokens in order, before the call resolves, so a caller can stream
   * them: the builtin engine at every decode step, the HTTP engines once per answered request
   * (the whole output, or each segment of an interrupted one). Every output token is told exactly
   * once. Stays in the calling process (never sent to a server or another actor).
   */
  onTokens?: (delta: TokenDelta) => void;
}

/**
 * Why generation stopped: `stop` (a stop token or string), `length` (max tokens or context),
 * `abort` (interrupted by a weight update or pause; the output so far is returned).
 */
export type StopReason = 'stop' | 'length' | 'abort';

/** One sample's output. All three arrays have the same length. */
export interface GenerateResult {
  outputTokens: number[];
  /** Logprob of each sampled token under the (tempered) distribution it was sampled from. */
  outputLogprobs: number[];
  /** Policy version that produced each token. */
  outputVersions: number[];
  /** With `gconfig.topLogprobs`: the most likely tokens at each position. */
  outputTopLogprobs?: TopLogprobs[];
  stopReason: StopReason;
  /** Wall time of the request in milliseconds. */
  latencyMs?: number;
}

/**
 * A policy's weights and their version, as the trainer publishes them to the engines: every
 * weight, or for a LoRA policy the adapter alone (applied over the base the engine started with).
 */
export type PolicyWeights =
  | { version: number; tensors: NamedTensors; adapter?: undefined }
  | { version: number; adapter: LoraAdapter; tensors?: undefined };

/** The engine update that loads `w`. */
export function policyWeightUpdate(w: PolicyWeights): WeightUpdate {
  return w.adapter ? { kind: 'lora', adapter: w.adapter } : { kind: 'tensors', tensors: w.tensors };
}

/**
 * How new weights reach an engine: in memory, as an HF checkpoint directory on disk, or (a LoRA
 * policy) as the adapter alone, applied over the base the engine was started with.
 */
export type WeightUpdate =
  | { kind: 'tensors'; tensors: NamedTensors }
  | { kind: 'disk'; path: string }
  | { kind: 'lora'; adapter: LoraAdapter };

/** What `pause` does with requests in flight. */
export interface PauseOptions {
  /** `abort`: return them now with stop reason `abort`; `wait`: let them finish. @default 'abort' */
  mode?: 'abort' | 'wait';
}

/** The interface shared by every engine (builtin, sglang, vllm). */
export interface InferenceEngine {
  /** `builtin`, `sglang` or `vllm`. */
  readonly kind: string;
  /** The largest `gconfig.topLogprobs` the engine takes; unset: it returns no alternatives. */
  readonly maxTopLogprobs?: number;
  /** One sample (`gconfig.n` must be 1 or unset). */
  generate(req: GenerateRequest): Promise<GenerateResult>;
  /** `gconfig.n` samples of the same prompt. */
  generateN(req: GenerateRequest): Promise<GenerateResult[]>;
  /** Load new weights and tag every later token with `version`. */
  updateWeights(update: WeightUpdate, version: number): Promise<void>;
  /** The version new tokens are tagged with. */
  getVersion(): number;
  /** Stop admitting decode steps; in-flight requests abort or finish per `opts.mode`. */
  pause(opts?: PauseOptions): Promise<void>;
  /** Admit work again after `pause`. */
  resume(): Promise<void>;
  /** Release memory (KV cache, weights on GPU engines) while the trainer trains. */
  sleep(): Promise<void>;
  /** Undo `sleep`. */
  wakeUp(): Promise<void>;
  /** Free everything; later calls fail. */
  close(): Promise<void>;
}

/** What a LoRA policy's servers must hold: adapters at once, their rank and target modules. */
export interface LoraServerSlots {
  /** Adapters a server holds at once: the run's maximum staleness + 2. */
  slots: number;
  /** The adapters' rank `r`. */
  rank: number;
  /** The modules the adapters target (`q_proj`, ...). */
  targetModules: readonly string[];
}

/** Flags and environment to start a server with. */
export interface ServerArgs {
  args: string[];
  env: Record<string, string>;
}
