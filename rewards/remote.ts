/**
 * Rewards scored by an HTTP service, in OpenRLHF's remote reward model protocol
 * (`--remote_rm_url`, `openrlhf/cli/serve_rm.py`): each request is a JSON `POST` to the URL as
 * given of
 *
 *     { "query": [text, ...], "prompts": [text, ...], "labels": [label or null, ...] }
 *
 * where a query is the prompt as the model saw it followed by the response (special tokens kept),
 * and the answer is `{ "rewards": [number, ...] }` in the same order, optionally with `"scores"`
 * and `"extra_logs": { name: [value, ...] }`. Queries that arrive together are sent together (up
 * to `maxBatch`, or whatever arrived within `lingerMs` of the first), a batch is split evenly
 * across the URLs, and a request that fails in a way a retry can help (no answer in time, a
 * refused connection, a 5xx or 429) is sent again, to the next URL, up to `retries` times.
 *
 * @module
 */
import { backoffDelayMs, delay } from '../engines/http/backoff.ts';
import { isEngineError } from '../engines/http/errors.ts';
import { httpCall } from '../engines/http/http-call.ts';
import { RemoteRewardError } from './errors.ts';

/** Options of {@link RemoteRewardClient}. */
export interface RemoteRewardOptions {
  /** The reward services; a batch is split evenly across them. */
  urls: string[];
  /** Queries per request at most. @default 32 */
  maxBatch?: number;
  /** How long the first query of a batch waits for others. @default 10 */
  lingerMs?: number;
  /** Limit on one request. @default 180_000 (OpenRLHF's) */
  timeoutMs?: number;
  /** Requests sent again after a retryable failure. @default 4 (5 tries, as OpenRLHF) */
  retries?: number;
  /** Delay before the first retry, doubling (with jitter) after. @default 1000 */
  retryDelayMs?: number;
  /**
   * Sent as `Authorization: Bearer <key>` (`rtjob serve --reward-model` requires one). A key in
   * a URL's user info (`http://rm:KEY@host/get_reward`) goes as HTTP Basic instead.
   */
  apiKey?: string;
}

/** Defaults of {@link RemoteRewardOptions}. */
export const remoteRewardDefaults = {
  maxBatch: 32,
  lingerMs: 10,
  timeoutMs: 180_000,
  retries: 4,
  retryDelayMs: 1000,
} as const;

/** One response to score. */
export interface RewardQuery {
  /** The prompt as the model saw it, then the response. */
  query: string;
  /** The prompt as the model saw it. */
  prompt: string;
  label?: string | undefined;
}

/** What the service said about one query. */
export interface RemoteReward {
  reward: number;
  /** `scores[i]` when the service sends scores. */
  score?: number;
  /** The query's entries of `extra_logs`. */
  extraLogs: Record<string, number | string | boolean>;
}

interface Pending {
  q: RewardQuery;
  resolve: (r: RemoteReward) => void;
  reject: (e: unknown) => void;
}

/**
 * Scores responses with remote reward services.
 *
 * @example
 * const rm = new RemoteRewardClient({ urls: ['http://127.0.0.1:5000/get_reward'] });
 * const { reward } = await rm.score({ query: prompt + response, prompt, label });
 */
export class RemoteRewardClient {
  private readonly o: Required<Omit<RemoteRewardOptions, 'apiKey'>>;
  private readonly headers: Record<string, string>;
  private pending: Pending[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** The URL the next batch starts at, so small batches spread over the services. */
  private next = 0;

  constructor(o: RemoteRewardOptions) {
    if (o.urls.length === 0)
      throw new RemoteRewardError('remote reward: no URL given', { url: undefined });
    const { apiKey, ...rest } = o;
    this.o = { ...remoteRewardDefaults, ...rest };
    this.headers = apiKey === undefined ? {} : { authorization: `Bearer ${apiKey}` };
  }

  /** The reward of one response; rejects with a {@link RemoteRewardError} when the service fails. */
  score(q: RewardQuery): Promise<RemoteReward> {
    return new Promise((resolve, reject) => {
      this.pending.push({ q, resolve, reject });
      if (this.pending.length >= this.o.maxBatch) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), this.o.lingerMs);
    });
  }

  /** Sends what is pending now. */
  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    while (this.pending.length) {
      const batch = this.pending.splice(0, this.o.maxBatch);
      const urls = this.o.urls.length;
      const per = Math.ceil(batch.length / urls);
      const first = this.next;
      this.next = (this.next + 1) % urls;
      for (let k = 0; k * per < batch.length; k++)
        void this.send(batch.slice(k * per, (k + 1) * per), (first + k) % urls);
    }
  }

  /** One shard of a batch to the URL at `at`, retried on the next URLs; settles every query. */
  private async send(shard: Pending[], at: number): Promise<void> {
    const body = {
      query: shard.map((p) => p.q.query),
      prompts: shard.map((p) => p.q.prompt),
      labels: shard.map((p) => p.q.label ?? null),
    };
    for (let attempt = 0; ; attempt++) {
      const url = this.o.urls[(at + attempt) % this.o.urls.length]!;
      try {
        const answer = await httpCall(url, body, {
          timeoutMs: this.o.timeoutMs,
          expectJson: true,
          headers: this.headers,
        });
        const rewards = readAnswer(answer, shard.length, url);
        shard.forEach((p, i) => p.resolve(rewards[i]!));
        return;
      } catch (e) {
        const retry = isEngineError(e) && e.retryable && attempt < this.o.retries;
        if (!retry) {
          const tries = attempt + 1;
          const why = e instanceof Error ? e.message : String(e);
          const err =
            e instanceof RemoteRewardError
              ? e
              : new RemoteRewardError(
                  `remote reward ${url} failed${tries > 1 ? ` after ${tries} tries` : ''}: ${why}`,
                  { url, cause: e },
                );
          shard.forEach((p) => p.reject(err));
          return;
        }
        await delay(
          backoffDelayMs(attempt, { baseDelayMs: this.o.retryDelayMs, maxDelayMs: 30_000 }),
        );
      }
    }
  }

  /** Fails what is still waiting to be sent. */
  close(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const err = new RemoteRewardError('remote reward client closed', { url: undefined });
    this.pending.splice(0).forEach((p) => p.reject(err));
  }
}

/** The rewards of an answer to `n` queries, or a {@link RemoteRewardError} naming what is wrong. */
function readAnswer(answer: unknown, n: number, url: string): RemoteReward[] {
  const bad = (what: string): never => {
    throw new RemoteRewardError(
      `remote reward ${url}: ${what} (expected {"rewards": [${n} numbers]})`,
      { url },
    );
  };
  if (typeof answer !== 'object' || answer === null || Array.isArray(answer))
    bad('the answer is not a JSON object');
  const a = answer as { rewards?: unknown; scores?: unknown; extra_logs?: unknown };
  const numbers = (v: unknown, key: string): number[] | undefined => {
    if (v === undefined || v === null) return undefined;
    if (!Array.isArray(v) || v.length !== n) bad(`'${key}' is not a list of ${n} (one per query)`);
    const list = v as unknown[];
    if (!list.every((x) => typeof x === 'number' && Number.isFinite(x)))
      bad(`'${key}' holds a value that is not a finite number`);
    return list as number[];
  };
  const rewards = numbers(a.rewards, 'rewards') ?? bad("no 'rewards'");
  const scores = numbers(a.scores, 'scores');
  const logs =
    typeof a.extra_logs === 'object' && a.extra_logs !== null
      ? Object.entries(a.extra_logs as Record<string, unknown>)
      : [];
  return rewards.map((reward, i) => {
    const extraLogs: RemoteReward['extraLogs'] = {};
    for (const [k, v] of logs) {
      const x = Array.isArray(v) && v.length === n ? (v as unknown[])[i] : v;
      if (typeof x === 'number' || typeof x === 'string' || typeof x === 'boolean')
        extraLogs[k] = x;
    }
    return { reward, ...(scores ? { score: scores[i]! } : {}), extraLogs };
  });
}
