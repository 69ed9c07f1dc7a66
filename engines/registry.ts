/**
 * Every engine kind in one table. train_ppo's rollout, `rtjob serve`, the evaluations of
 * train_sft, eval_arith and eval_agent, the flag tables and the CLI read it, so `--engine` and
 * `--rollout-dtype` mean the same thing in every command and a new engine is its folder plus one
 * entry here (`engines/README.md`, "Adding an engine").
 *
 * An entry says where its kind generates (`in-process`: it loads the weights in this process;
 * `servers`: it drives SGLang- or vLLM-style servers by URL; `model-free`: no model, for
 * benchmarks of the orchestration), whether `--engine` offers it, which engine flags apply, and
 * how to build one. Optional engines (`node-llama-cpp`) are imported only when built.
 *
 * @module
 */
import type { GgufDtype } from '../model/gguf/index.ts';
import type { CausalLM } from '../model/llama.ts';
import type { NamedTensors } from '../model/tensors.ts';
import type { ChatTokenizer } from '../model/tokenizer.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';
import { BuiltinEngine } from './builtin/engine.ts';
import {
  SimulatedEngine,
  simulatedEngine,
  type SimulatedLengths,
} from './simulated/simulated-engine.ts';
import type { DistributedSyncOptions } from './http/distributed-weights.ts';
import { sglangLoraServerArgs } from './sglang/lora-args.ts';
import type { InferenceEngine, LoraServerSlots, ServerArgs } from './types.ts';
import { vllmLoraServerArgs } from './vllm/lora-args.ts';

/** What any kind may be built from; each reads the fields its entry names. */
export interface EngineBuildOptions {
  /** In process: the HF model directory to load (or pass `model`). */
  modelPath?: string;
  /**
   * In process: an already loaded model. The builtin engine computes with it (it sees the
   * caller's weights); llama.cpp converts a copy, so the caller sends later weights with
   * `updateWeights`.
   */
  model?: CausalLM;
  /** Needed for stop strings; loaded from `modelPath` when present there. */
  tokenizer?: ChatTokenizer;
  /** Seed of the engine's sampling stream. @default 0 */
  seed?: number;
  /** builtin: most sequences decoded together. @default 256 */
  maxBatchSize?: number;
  /** llamacpp: element type of the GGUF's matrices (f32 reproduces the builtin tokens). @default 'f32' */
  dtype?: GgufDtype;
  /** llamacpp: sequences decoded together (their KV cache is allocated up front). @default 16 */
  maxSequences?: number;
  /** llamacpp: tokens one sequence holds (prompt + output). @default the model's, at most 4096 */
  contextSize?: number;
  /** llamacpp: a GPU build (`false`: the CPU build); fails rather than run on the CPU. @default false */
  gpu?: false | 'auto' | 'cuda' | 'vulkan';
  /** Servers: their base URLs (requests are routed across them by load). */
  urls?: string[];
  /** Servers: limit on one weight update. @default 600_000 */
  weightSyncTimeoutMs?: number;
  /** Servers: writes an HF directory of `tensors` for the servers to reload, returns its path. */
  writeCheckpoint?: (tensors: NamedTensors, version: number) => Promise<string>;
  /** Servers whose entry has `weightBroadcast`: full weights by broadcast over c10d, not by disk. */
  weightSync?: DistributedSyncOptions;
  /** Servers, a LoRA policy: where each version's PEFT adapter is written, and slots per server. */
  loraDir?: string;
  loraSlots?: number;
  /** simulated: a long-tailed length distribution (else one token per request). */
  simulated?: SimulatedLengths;
}

/** One engine kind. */
export interface EngineSpec {
  /** Where it generates. */
  runs: 'in-process' | 'servers' | 'model-free';
  /** Offered by `--engine`. */
  offered: boolean;
  /** `--rollout-dtype` and `--llamacpp-gpu` apply to it. */
  gguf: boolean;
  /** One line for `--help` and the READMEs. */
  summary: string;
  create(o: EngineBuildOptions): Promise<InferenceEngine>;
  /**
   * Servers that join a c10d group and take full weights broadcast from rank 0 (SGLang's and
   * vLLM's RL routes), so `--vllm_sync_backend gloo|nccl` applies.
   */
  weightBroadcast: boolean;
  /** Servers: the flags a LoRA policy's servers start with (`engines/launcher.ts`). */
  loraServerArgs?: (o: LoraServerSlots) => ServerArgs;
}

const serverOptions = (o: EngineBuildOptions) => {
  if (!o.urls?.length) throw new InvalidArgumentError('an engine on servers needs their URLs');
  return {
    urls: o.urls,
    ...(o.weightSyncTimeoutMs ? { weightSyncTimeoutMs: o.weightSyncTimeoutMs } : {}),
    ...(o.writeCheckpoint ? { writeCheckpoint: o.writeCheckpoint } : {}),
    ...(o.weightSync ? { weightSync: o.weightSync } : {}),
    ...(o.loraDir ? { loraDir: o.loraDir, loraSlots: o.loraSlots } : {}),
  };
};

const engines = {
  builtin: {
    runs: 'in-process',
    offered: true,
    gguf: false,
    weightBroadcast: false,
    summary: "rtjob's own batched decoder on the TF.js model",
    create: async (o) =>
      BuiltinEngine.create({
        model: o.model,
        modelPath: o.modelPath,
        tokenizer: o.tokenizer,
        seed: o.seed ?? 0,
        maxBatchSize: o.maxBatchSize,
      }),
  },
  llamacpp: {
    runs: 'in-process',
    offered: true,
    gguf: true,
    weightBroadcast: false,
    summary: 'llama.cpp (node-llama-cpp) on a GGUF written from the same weights',
    create: async (o) => {
      const { LlamaCppEngine } = await import('./llamacpp/index.ts');
      return LlamaCppEngine.create({
        model: o.model,
        modelPath: o.modelPath,
        tokenizer: o.tokenizer,
        seed: o.seed ?? 0,
        dtype: o.dtype ?? 'f32',
        maxSequences: o.maxSequences,
        contextSize: o.contextSize,
        gpu: o.gpu ?? false,
      });
    },
  },
  sglang: {
    runs: 'servers',
    offered: true,
    gguf: false,
    weightBroadcast: true,
    summary: 'SGLang servers through their native /generate and weight-update routes',
    loraServerArgs: sglangLoraServerArgs,
    create: async (o) => {
      const { SglangEngine } = await import('./sglang/index.ts');
      return new SglangEngine(serverOptions(o));
    },
  },
  vllm: {
    runs: 'servers',
    offered: true,
    gguf: false,
    weightBroadcast: true,
    summary: 'vLLM servers through their OpenAI routes and weight reload',
    loraServerArgs: vllmLoraServerArgs,
    create: async (o) => {
      const { VllmEngine } = await import('./vllm/index.ts');
      return new VllmEngine(serverOptions(o));
    },
  },
  simulated: {
    runs: 'model-free',
    offered: false,
    gguf: false,
    weightBroadcast: false,
    summary: 'no model: tokens after a per-token delay (orchestration benchmarks)',
    create: async (o) => (o.simulated ? simulatedEngine(o.simulated) : new SimulatedEngine()),
  },
} satisfies Record<string, EngineSpec>;

type Engines = typeof engines;
/** The kind `--engine` defaults to. */
export const defaultEngineKind = 'builtin' satisfies EngineKind;
/** Every engine kind. */
export type EngineKind = keyof Engines;
/** The kinds `--engine` offers. */
export type OfferedEngineKind = {
  [K in EngineKind]: Engines[K]['offered'] extends true ? K : never;
}[EngineKind];
/** The kinds that generate in this process. */
export type LocalEngineKind = {
  [K in EngineKind]: Engines[K]['runs'] extends 'in-process' ? K : never;
}[EngineKind];
/** The kinds that drive servers. */
export type ServerEngineKind = {
  [K in EngineKind]: Engines[K]['runs'] extends 'servers' ? K : never;
}[EngineKind];

const kinds = Object.keys(engines) as EngineKind[];
/** The kinds `--engine` offers, in table order. */
export const offeredEngineKinds = kinds.filter((k) => engines[k].offered) as OfferedEngineKind[];
/** The kinds that generate in this process, in table order. */
export const localEngineKinds = kinds.filter(
  (k) => engines[k].runs === 'in-process',
) as LocalEngineKind[];
/** The kinds that drive servers, in table order. */
export const serverEngineKinds = kinds.filter(
  (k) => engines[k].runs === 'servers',
) as ServerEngineKind[];

/** `a, b or c`. */
const choices = (ks: readonly string[]) =>
  ks.length < 2 ? ks.join('') : `${ks.slice(0, -1).join(', ')} or ${ks[ks.length - 1]}`;

/** The entry of `kind`; a kind not in the table fails with one line naming those that are. */
export function engineSpec(kind: string, flag = '--engine'): EngineSpec {
  if (!Object.hasOwn(engines, kind))
    throw new InvalidArgumentError(`${flag}: expected ${offeredEngineNames()}, got '${kind}'`);
  return engines[kind as EngineKind];
}

/** The entry of a kind on servers. */
export function serverSpec(kind: ServerEngineKind): Required<EngineSpec> {
  return engines[kind];
}

/** Whether `kind` generates in this process (so it loads the weights itself). */
export const runsInProcess = (kind: string): boolean => engineSpec(kind).runs === 'in-process';

/** The kinds `--engine` offers, as `a, b or c`. */
export const offeredEngineNames = (): string => choices(offeredEngineKinds);

/** The kinds of `--engine` that take `--rollout-dtype` and `--llamacpp-gpu`, as `a or b`. */
export const ggufEngineNames = (): string =>
  choices(offeredEngineKinds.filter((k) => engines[k].gguf).map((k) => `--engine ${k}`));

/** The kinds whose servers take weights by broadcast, as `--engine a or --engine b`. */
export const weightBroadcastEngineNames = (): string =>
  choices(offeredEngineKinds.filter((k) => engines[k].weightBroadcast).map((k) => `--engine ${k}`));

/** The kinds that drive servers, as `--engine a or --engine b`. */
export const serverEngineNames = (): string =>
  choices(serverEngineKinds.map((k) => `--engine ${k}`));

/**
 * Builds a ready engine of `kind` (default `builtin`). node-llama-cpp is loaded only for `llamacpp`, and fails with
 * a one-line `LLAMACPP_UNAVAILABLE` error naming the install command when it is missing.
 *
 * @example
 * const engine = await createEngine('llamacpp', { modelPath: dir, dtype: 'f32' });
 */
export function createEngine(
  kind: EngineKind = defaultEngineKind,
  o: EngineBuildOptions = {},
): Promise<InferenceEngine> {
  return engineSpec(kind).create(o);
}
