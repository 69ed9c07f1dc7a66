/**
 * The gateway as a standalone OpenAI-compatible server for any checkpoint (`rtjob serve`): the
 * builtin engine loads the model, or SGLang / vLLM servers that already serve it generate (the
 * directory still gives the tokenizer, chat template and context length); one key (given or
 * generated) opens it, nothing is recorded.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import {
  createEngine,
  runsInProcess,
  serverEngineNames,
  type OfferedEngineKind,
} from '../engines/registry.ts';
import type { InferenceEngine } from '../engines/types.ts';
import { readLoraAdapter } from '../model/lora-adapter.ts';
import { loadTokenizer } from '../model/tokenizer.ts';
import { modelCard } from './model-card.ts';
import { Gateway } from './server.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';

/** Options of {@link serveModel}. */
export interface ServeOptions {
  /** HF model directory. */
  pretrain: string;
  /** @default '127.0.0.1' */
  host?: string;
  /** @default 8000; 0 picks a free port */
  port?: number;
  /** The key clients send; generated when unset. */
  apiKey?: string;
  /** The model name clients request. @default the directory's name */
  model?: string;
  /** @default 'hermes' */
  toolCallParser?: string;
  /** Completion cap and default `max_tokens`. @default the context length */
  maxTokens?: number;
  /** Seed of the sampling stream (builtin). @default 0 */
  seed?: number;
  /** What generates: an in-process engine, or the servers of `engineUrls`. @default 'builtin' */
  engine?: OfferedEngineKind;
  /** GGUF element type of the `llamacpp` engine. @default 'f32' */
  rolloutDtype?: 'f32' | 'f16' | 'bf16' | 'q8_0';
  /** The `llamacpp` engine's GPU build (`false`: the CPU build). @default false */
  llamacppGpu?: 'auto' | 'cuda' | 'vulkan' | false;
  /** SGLang or vLLM servers serving the model in `pretrain` (their own checkpoint of it). */
  engineUrls?: string[];
  /**
   * A PEFT LoRA adapter directory served over `pretrain`: handed to the engine as a
   * `{ kind: 'lora' }` weight update, so every engine that applies adapters serves it.
   */
  lora?: string;
}

/** A running server. */
export interface Served {
  gateway: Gateway;
  apiKey: string;
  close(): Promise<void>;
}

async function serveEngine(o: ServeOptions): Promise<InferenceEngine> {
  const kind = o.engine ?? 'builtin';
  if (runsInProcess(kind)) {
    if (o.engineUrls?.length)
      throw new InvalidArgumentError(`--engine-url needs ${serverEngineNames()}`);
    return createEngine(kind, {
      modelPath: o.pretrain,
      seed: o.seed ?? 0,
      dtype: o.rolloutDtype,
      gpu: o.llamacppGpu ?? false,
    });
  }
  const urls = o.engineUrls ?? [];
  if (urls.length === 0) throw new InvalidArgumentError(`--engine ${kind} needs --engine-url`);
  // Nothing is trained here: no weight updates, so no checkpoint writer.
  return createEngine(kind, { urls });
}

/** Serves `pretrain` on the builtin engine, or through the SGLang / vLLM servers given. */
export async function serveModel(o: ServeOptions): Promise<Served> {
  if (!existsSync(join(o.pretrain, 'config.json'))) {
    throw new InvalidArgumentError(`--pretrain: no model directory (config.json) at ${o.pretrain}`);
  }
  if (o.apiKey !== undefined && o.apiKey.length < 8)
    throw new InvalidArgumentError('--api-key: use at least 8 characters');
  const card = modelCard(o.pretrain);
  const tokenizer = loadTokenizer(o.pretrain);
  const engine = await serveEngine(o);
  if (o.lora !== undefined) {
    try {
      await engine.updateWeights({ kind: 'lora', adapter: readLoraAdapter(o.lora) }, 0);
    } catch (err) {
      await engine.close();
      throw new InvalidArgumentError(`--lora: ${(err as Error).message}`);
    }
  }
  const contextLength = card.contextLength ?? 2048;
  let gateway: Gateway;
  try {
    gateway = await Gateway.start({
      engine,
      tokenizer,
      model: o.model ?? card.name,
      contextLength,
      maxNewTokens: Math.min(o.maxTokens ?? contextLength, contextLength),
      toolCallParser: o.toolCallParser ?? 'hermes',
      host: o.host ?? '127.0.0.1',
      port: o.port ?? 8000,
    });
  } catch (err) {
    await engine.close();
    throw err;
  }
  const apiKey = o.apiKey ?? `rtj-${randomBytes(24).toString('base64url')}`;
  gateway.addStaticKey(apiKey);
  return {
    gateway,
    apiKey,
    close: async () => {
      await gateway.close();
      await engine.close();
    },
  };
}
