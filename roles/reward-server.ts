/**
 * The reward model served over HTTP (`rtjob serve --reward-model DIR`), in OpenRLHF's remote
 * reward model protocol (`openrlhf/cli/serve_rm.py`), so `train_ppo --remote-rm-url` (rtjob's or
 * OpenRLHF's) and any reward function can score with it:
 *
 *     POST /get_reward   { "query": [text, ...], "prompts"?: [...], "labels"?: [...] }
 *                     -> { "rewards": [number, ...] }
 *
 * A query is the prompt as the model saw it followed by the response, special tokens written out
 * (what `--remote-rm-url` sends); it is tokenized with the reward model's tokenizer, special
 * tokens recognised, and scored by the {@link RewardModel} role's own code, so a served score is
 * the score `train_ppo --reward-pretrain` gives the same tokens. Unlike OpenRLHF, the text is
 * scored as sent: no pad or EOS is stripped or appended (the query already ends as the episode
 * did). `prompts` and `labels` are accepted and ignored, as there.
 *
 * Unlike OpenRLHF's server it binds loopback and needs a key, as `rtjob serve` does:
 * `Authorization: Bearer <key>`, or HTTP Basic with the key as the password (what a client sends
 * for a URL `http://rm:<key>@host:port/get_reward`, Python's `requests` included).
 *
 * @module
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, readSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { GatewayError } from '../gateway/errors.ts';
import { modelCard } from '../gateway/model-card.ts';
import { sendJson } from '../gateway/sse.ts';
import { valueHeadName } from '../model/llama.ts';
import { loadTokenizer } from '../model/tokenizer.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';
import { RewardModel } from './reward-model.ts';

/** Options of {@link serveRewardModel}. */
export interface RewardServerOptions {
  /** HF directory written by `train_rm` (with `value_head.weight`). */
  rewardModel: string;
  /** @default '127.0.0.1' */
  host?: string;
  /** @default 8000; 0 picks a free port */
  port?: number;
  /** The key clients send; generated when unset. */
  apiKey?: string;
  /** Queries per forward pass. @default 16 */
  microBatchSize?: number;
  /** Largest request body. @default 16 MiB */
  maxBodyBytes?: number;
}

/** A running reward server. */
export interface RewardServer {
  /** `http://host:port/get_reward`, what `--remote-rm-url` takes. */
  url: string;
  apiKey: string;
  close(): Promise<void>;
}

/** The route, as OpenRLHF names it. */
export const rewardRoute = '/get_reward';

/** Loads the reward model and serves {@link rewardRoute} until closed. */
export async function serveRewardModel(o: RewardServerOptions): Promise<RewardServer> {
  if (!existsSync(join(o.rewardModel, 'config.json')))
    throw new InvalidArgumentError(
      `--reward-model: no model directory (config.json) at ${o.rewardModel}`,
    );
  if (!savedValueHead(o.rewardModel))
    throw new InvalidArgumentError(
      `--reward-model: ${o.rewardModel} has no value head: train one with train_rm (or serve a policy with --pretrain)`,
    );
  if (o.apiKey !== undefined && o.apiKey.length < 8)
    throw new InvalidArgumentError('--api-key: use at least 8 characters');
  const apiKey = o.apiKey ?? `rtj-${randomBytes(24).toString('base64url')}`;
  const keyHash = sha256(apiKey);
  const tokenizer = loadTokenizer(o.rewardModel);
  const contextLength = modelCard(o.rewardModel).contextLength;
  const rm = new RewardModel({ pretrain: o.rewardModel });
  await rm.ready();
  const maxBody = o.maxBodyBytes ?? 16 << 20;
  const micro = o.microBatchSize ?? 16;

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    try {
      const path = (req.url ?? '/').split('?')[0]!.replace(/\/+$/, '');
      authorize(req, keyHash);
      if (path !== rewardRoute)
        throw new GatewayError(404, 'not_found', `no route ${req.method} ${path}`);
      if (req.method !== 'POST')
        throw new GatewayError(405, 'method_not_allowed', `method ${req.method} not allowed here`);
      const queries = readQueries(await readJson(req, maxBody));
      const seqs = queries.map((q, i) => {
        const ids = tokenizer.encode(q);
        if (ids.length === 0) throw badQuery(i, 'is empty');
        if (contextLength !== undefined && ids.length > contextLength)
          throw badQuery(i, `has ${ids.length} tokens, over the context length ${contextLength}`);
        return ids;
      });
      sendJson(res, 200, { rewards: await rm.scores(seqs, micro) });
    } catch (err) {
      const e =
        err instanceof GatewayError
          ? err
          : new GatewayError(500, 'engine_error', err instanceof Error ? err.message : String(err));
      sendJson(res, e.status, e.toBody());
    }
  };

  const server = createServer((req, res) => void handle(req, res));
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(o.port ?? 8000, o.host ?? '127.0.0.1', () => resolve());
    });
  } catch (err) {
    rm.dispose();
    throw err;
  }
  const a = server.address() as AddressInfo;
  const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
  return {
    url: `http://${host}:${a.port}${rewardRoute}`,
    apiKey,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rm.dispose();
    },
  };
}

/** Whether the checkpoint holds a value head (a policy's loads with a zero one, scoring all 0). */
function savedValueHead(dir: string): boolean {
  const index = join(dir, 'model.safetensors.index.json');
  if (existsSync(index)) {
    const map = (JSON.parse(readFileSync(index, 'utf8')) as { weight_map?: object }).weight_map;
    return valueHeadName in (map ?? {});
  }
  const file = join(dir, 'model.safetensors');
  if (!existsSync(file)) return false;
  // The safetensors header: a u64 length, then JSON naming every tensor.
  const fd = openSync(file, 'r');
  try {
    const len = Buffer.alloc(8);
    readSync(fd, len, 0, 8, 0);
    const header = Buffer.alloc(Number(len.readBigUInt64LE()));
    readSync(fd, header, 0, header.length, 8);
    return valueHeadName in (JSON.parse(header.toString('utf8')) as object);
  } finally {
    closeSync(fd);
  }
}

function sha256(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** A Bearer key, or HTTP Basic's password (or user, when no password is given). */
function authorize(req: IncomingMessage, keyHash: Buffer): void {
  const h = req.headers.authorization ?? '';
  let key = /^Bearer\s+(\S+)\s*$/i.exec(h)?.[1];
  const basic = /^Basic\s+(\S+)\s*$/i.exec(h)?.[1];
  if (key === undefined && basic !== undefined) {
    const [user = '', ...pass] = Buffer.from(basic, 'base64').toString('utf8').split(':');
    key = pass.join(':') || user;
  }
  if (key === undefined)
    throw new GatewayError(
      401,
      'invalid_api_key',
      'You did not provide an API key: send Authorization: Bearer <key> (train_ppo: RTJOB_REMOTE_RM_API_KEY), or put it in the URL as http://rm:<key>@host:port/get_reward.',
    );
  if (!timingSafeEqual(sha256(key), keyHash))
    throw new GatewayError(
      401,
      'invalid_api_key',
      'Incorrect API key provided: use the key the server printed when it started (--api-key or RTJOB_SERVE_API_KEY sets one).',
    );
}

async function readJson(req: IncomingMessage, maxBytes: number): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > maxBytes)
      throw new GatewayError(413, 'request_too_large', `request body over ${maxBytes} bytes`);
    chunks.push(c as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch (err) {
    throw new GatewayError(
      400,
      'invalid_json',
      `body is not valid JSON: ${(err as Error).message}`,
    );
  }
}

function readQueries(body: unknown): string[] {
  const q = (body as { query?: unknown } | null)?.query;
  if (!Array.isArray(q) || !q.every((x) => typeof x === 'string'))
    throw new GatewayError(
      400,
      'invalid_request',
      'query: expected {"query": [text, ...]} (the prompt as the model saw it, then the response)',
      'query',
    );
  return q as string[];
}

function badQuery(i: number, what: string): GatewayError {
  return new GatewayError(400, 'invalid_request', `query[${i}] ${what}`, 'query');
}
