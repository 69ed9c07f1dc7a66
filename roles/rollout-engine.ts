/**
 * How a rollout's engine is made: the builtin model or llama.cpp in this worker, the simulated
 * engine for benchmarks, or a proxy to SGLang / vLLM servers (given by URL, or started here by
 * `--engine-launch`). For a LoRA policy the servers are started with adapter slots and each
 * version's adapter is written as a PEFT directory under the weights dir, which the servers load
 * by name (`engines/README.md`).
 *
 * @module
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { currentRuntime } from '../runtime/client/runtime.ts';
import { readEnv } from '../runtime/env.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';
import {
  createEngine,
  engineSpec,
  type EngineKind,
  type ServerEngineKind,
} from '../engines/registry.ts';
import { launchServerCommand, type LaunchedServer } from '../engines/launcher.ts';
import type { SimulatedLengths } from '../engines/simulated/simulated-engine.ts';
import type { InferenceEngine } from '../engines/types.ts';
import { writeAtomic } from '../model/checkpoint.ts';
import { serializeSafetensors } from '../model/safetensors.ts';
import type { NamedTensors } from '../model/tensors.ts';
import type { GgufDtype } from '../model/gguf/index.ts';

/** What the servers of a LoRA policy need to know (see `engines/launcher.ts` `loraServerArgs`). */
export interface RolloutLora {
  /** The adapter's rank `r`. */
  rank: number;
  /** The modules it targets (`q_proj`, ...). */
  targetModules: readonly string[];
  /** Adapters a server holds at once: the run's maximum staleness + 2. */
  slots: number;
}

/** What the engine of a rollout is made from (the engine's part of `RolloutInit`). */
export interface RolloutEngineInit {
  /** HF model directory (weights for the builtin engine, tokenizer for all). */
  pretrain: string;
  /** @default 'builtin' */
  engine?: EngineKind;
  /** Element type of the `llamacpp` engine's GGUF (f32 reproduces the trainer's tokens). @default 'f32' */
  rolloutDtype?: GgufDtype;
  /** The `llamacpp` engine's GPU build (`false`: the CPU build). @default false */
  llamacppGpu?: 'auto' | 'cuda' | 'vulkan' | false;
  /** Server URLs of an `sglang` / `vllm` engine (requests are routed across them by load). */
  engineUrls?: string[];
  /**
   * Instead of `engineUrls`: the command that starts this rollout's own `sglang` / `vllm` server
   * (`{port}`, `{model}` filled in; `launchServerCommand`), on the GPUs of this rollout's
   * process, stopped by `close()`.
   */
  engineLaunch?: string;
  /**
   * Where weights for `sglang` / `vllm` servers are written (an HF directory per version, read by
   * the servers' reload endpoint, so it must be on a filesystem they see).
   */
  weightsDir?: string;
  /** Lengths and speed of the `simulated` engine (benchmarks of the orchestration). */
  simulated?: SimulatedLengths;
  /**
   * The policy is a LoRA adapter: `sglang` / `vllm` servers are started with adapter slots
   * (`--engine-launch`) and load each version's adapter by name (`engines/README.md`).
   */
  lora?: RolloutLora;
  /**
   * How full weights reach `sglang` / `vllm` servers: `gloo` or `nccl` (broadcast from this
   * process, rank 0 of a group the servers join at this rollout's address) or `disk` (a
   * checkpoint under `weightsDir` they reload). A LoRA adapter is always written for them to
   * load. @default 'disk'
   */
  weightSyncBackend?: 'disk' | 'gloo' | 'nccl';
  /** Limit on one weight update of an `sglang` / `vllm` engine. @default 600_000 */
  weightSyncTimeoutMs?: number;
  /** Seed of the engine's sampling stream. @default 0 */
  seed?: number;
  generateMaxLen: number;
  promptMaxLen: number;
  /** Episodes at once; @default ASYNC_NUM_TASKS from the environment, else 128 */
  asyncNumTasks?: number;
}

/** Episodes a rollout runs at once: its init's, else `ASYNC_NUM_TASKS`, else 128. */
export function rolloutConcurrency(init: { asyncNumTasks?: number | undefined }): number {
  return init.asyncNumTasks ?? readEnv('ASYNC_NUM_TASKS') ?? 128;
}

/**
 * The engine `init` asks for, and the server this rollout started for it (stopped by the
 * rollout's `close`).
 */
export async function createRolloutEngine(
  init: RolloutEngineInit,
): Promise<{ engine: InferenceEngine; server?: LaunchedServer }> {
  const { engine: kind = 'builtin', pretrain } = init;
  const spec = engineSpec(kind);
  if (spec.runs === 'model-free')
    return {
      engine: await createEngine(kind, init.simulated ? { simulated: init.simulated } : {}),
    };
  if (spec.runs === 'in-process') {
    const maxConcurrent = rolloutConcurrency(init);
    return {
      engine: await createEngine(kind, {
        modelPath: pretrain,
        seed: init.seed ?? 0,
        dtype: init.rolloutDtype,
        gpu: init.llamacppGpu ?? false,
        // llama.cpp: one sequence per episode in flight, each as long as an episode may grow.
        maxSequences: Math.min(maxConcurrent, 64),
        contextSize: init.promptMaxLen + init.generateMaxLen * 4,
      }),
    };
  }
  const server =
    init.engineLaunch !== undefined
      ? await launchServerCommand(init.engineLaunch, {
          model: pretrain,
          name: `${kind} server`,
          ...(init.lora
            ? {
                lora: {
                  engine: kind as ServerEngineKind,
                  slots: init.lora.slots,
                  rank: init.lora.rank,
                  targetModules: init.lora.targetModules,
                },
              }
            : {}),
          // Its output goes to this rollout's log.
          logSink: (line) => process.stdout.write(`[${kind}] ${line}\n`),
        })
      : undefined;
  const urls = server ? [server.url] : (init.engineUrls ?? []);
  if (urls.length === 0)
    throw new InvalidArgumentError(
      `engine ${kind} needs server URLs (--engine-url) or a command (--engine-launch)`,
    );
  const weightsDir = resolve(
    init.weightsDir ?? join(tmpdir(), `rtjob-engine-weights-${process.pid}`),
  );
  const sync = init.weightSyncBackend;
  const engine = await createEngine(kind, {
    urls,
    ...(init.weightSyncTimeoutMs ? { weightSyncTimeoutMs: init.weightSyncTimeoutMs } : {}),
    ...(sync && sync !== 'disk'
      ? { weightSync: { backend: sync, host: currentRuntime()?.server.host ?? '127.0.0.1' } }
      : {}),
    writeCheckpoint: (t: NamedTensors, v: number) =>
      writeEngineCheckpoint(weightsDir, pretrain, t, v),
    ...(init.lora ? { loraDir: join(weightsDir, 'lora'), loraSlots: init.lora.slots } : {}),
  });
  return { engine, ...(server ? { server } : {}) };
}

/**
 * Writes `tensors` as an HF model directory `dir/v<version>` (config and tokenizer from `pretrain`)
 * for a server to load, removes versions older than the previous one, and returns the path.
 */
export async function writeEngineCheckpoint(
  dir: string,
  pretrain: string,
  tensors: NamedTensors,
  version: number,
): Promise<string> {
  const out = join(dir, `v${version}`);
  mkdirSync(out, { recursive: true });
  for (const f of [
    'config.json',
    'generation_config.json',
    'tokenizer.json',
    'tokenizer_config.json',
  ]) {
    if (existsSync(join(pretrain, f))) copyFileSync(join(pretrain, f), join(out, f));
  }
  writeAtomic(join(out, 'model.safetensors'), serializeSafetensors(tensors));
  for (const name of readdirSync(dir)) {
    const v = /^v(\d+)$/.exec(name);
    if (v && Number(v[1]) < version - 1) rmSync(join(dir, name), { recursive: true, force: true });
  }
  return out;
}
