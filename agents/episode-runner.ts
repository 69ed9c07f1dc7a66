/**
 * Runs agent episodes against one engine with at most `maxConcurrent` (ASYNC_NUM_TASKS) at once,
 * a per-episode timeout, and a group per prompt. An episode that throws or hangs fails its whole
 * group (a partial group would bias group baselines) and is reported, not raised; a contract
 * error (a malformed return value) is a bug in the agent and is raised at once.
 *
 * @module
 */
import type { GenerationConfig, InferenceEngine } from '../engines/types.ts';
import type { Gateway } from '../gateway/server.ts';
import { agentKind, type GroupResult } from './kinds.ts';
import { AgentContractError, EpisodeError, EpisodeTimeoutError } from './errors.ts';
import { Semaphore } from '../runtime/semaphore.ts';
import type { Agent, AgentTokenizer, Sample } from './types.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';

/** Settings of an `EpisodeRunner`. */
export interface EpisodeRunnerOptions {
  agent: Agent;
  tokenizer: AgentTokenizer;
  gconfig: GenerationConfig;
  /** Prompt + generated + feedback budget in tokens. */
  maxLength: number;
  /** Episodes at once (ASYNC_NUM_TASKS). @default 128 */
  maxConcurrent?: number;
  /** A hung episode fails after this long; 0 disables. @default 0 */
  episodeTimeoutMs?: number;
  /** The OpenAI-compatible gateway black-box agents (`kind: 'agent'`) talk to. */
  gateway?: Gateway;
  /** Reward factor per completion before an agent episode's last. @default 1 */
  turnDiscount?: number;
}

export type { GroupResult } from './kinds.ts';

/** Runs groups of episodes for one engine. */
export class EpisodeRunner {
  readonly slots: Semaphore;
  private readonly o: Required<Omit<EpisodeRunnerOptions, 'gateway'>> &
    Pick<EpisodeRunnerOptions, 'gateway'>;
  private seq = 0;

  constructor(o: EpisodeRunnerOptions) {
    this.o = { maxConcurrent: 128, episodeTimeoutMs: 0, turnDiscount: 1, ...o };
    if (agentKind(o.agent).needsGateway && !o.gateway)
      throw new InvalidArgumentError(
        `an agent file exporting ${agentKind(o.agent).marker} needs a gateway`,
      );
    this.slots = new Semaphore(this.o.maxConcurrent);
  }

  /** Episodes running now. */
  get running(): number {
    return this.slots.inUse;
  }

  /** Runs every episode of `sample`'s group (n step-function or agent episodes, or one workflow call). */
  runGroup(engine: InferenceEngine, sample: Sample): Promise<GroupResult> {
    const { agent } = this.o;
    return agentKind(agent).runGroup(agent, {
      engine,
      sample,
      tokenizer: this.o.tokenizer,
      gconfig: this.o.gconfig,
      maxLength: this.o.maxLength,
      gateway: this.o.gateway,
      turnDiscount: this.o.turnDiscount,
      episode: (fn) => this.episode(sample, fn),
      rid: () => String(this.seq++),
    });
  }

  /** One episode under a slot and the timeout; episode failures come back as values. */
  private async episode<T>(
    sample: Sample,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T | Error> {
    await this.slots.acquire();
    let timer: NodeJS.Timeout | undefined;
    const abort = new AbortController();
    try {
      const work = fn(abort.signal);
      const timeoutMs = this.o.episodeTimeoutMs;
      if (timeoutMs <= 0) return await work;
      // A hung episode cannot be cancelled from outside; it is abandoned and its slot freed.
      work.catch(() => undefined);
      return await Promise.race([
        work,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const err = new EpisodeTimeoutError(this.o.agent.file, sample.index, timeoutMs);
            abort.abort(err);
            reject(err);
          }, timeoutMs);
        }),
      ]);
    } catch (err) {
      if (err instanceof AgentContractError) throw err;
      if (err instanceof EpisodeTimeoutError) return err;
      return new EpisodeError(this.o.agent.file, sample.index, err);
    } finally {
      if (timer) clearTimeout(timer);
      this.slots.release();
    }
  }
}
