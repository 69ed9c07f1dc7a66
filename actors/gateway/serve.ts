/**
 * The gateway as a standalone OpenAI-compatible server for any checkpoint (`rtjob serve`): the
 * builtin engine loads the model, one key (given or generated) opens it, nothing is recorded.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { BuiltinEngine } from '../engines/builtin/engine.ts';
import { loadTokenizer } from '../model/tokenizer.ts';
import { modelCard } from './model-card.ts';
import { Gateway } from './server.ts';

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
  /** Seed of the sampling stream. @default 0 */
  seed?: number;
}

/** A running server. */
export interface Served {
  gateway: Gateway;
  apiKey: string;
  close(): Promise<void>;
}

/** Loads `pretrain` on the builtin engine and serves it. */
export async function serveModel(o: ServeOptions): Promise<Served> {
  if (!existsSync(join(o.pretrain, 'config.json'))) {
    throw new RangeError(`--pretrain: no model directory (config.json) at ${o.pretrain}`);
  }
  if (o.apiKey !== undefined && o.apiKey.length < 8)
    throw new RangeError('--api-key: use at least 8 characters');
  const card = modelCard(o.pretrain);
  const tokenizer = loadTokenizer(o.pretrain);
  const engine = await BuiltinEngine.create({ modelPath: o.pretrain, seed: o.seed ?? 0 });
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
