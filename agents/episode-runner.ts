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
import type { Trajectory } from '../algorithms/trajectory.ts';
import { runGatewayEpisode } from './agent-executor.ts';
import { AgentContractError, EpisodeError, EpisodeTimeoutError } from './errors.ts';
import { Semaphore } from '../runtime/semaphore.ts';
import { runStepEpisode } from './step-executor.ts';
import type { Agent, AgentTokenizer, Sample } from './types.ts';
import { runWorkflowEpisode } from './workflow-executor.ts';
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

/** The outcome of one prompt's group. */
export interface GroupResult {
  index: number;
  groupId: string;
  /** `ok`: trajectories present; `rejected`: the workflow returned null; `failed`: an episode threw or timed out. */
  status: 'ok' | 'rejected' | 'failed';
  trajectories: Trajectory[];
  /** Episode error messages of a failed group. */
  errors: string[];
  /** Episodes the group ran (or tried). */
  episodes: number;
}

/** Runs groups of episodes for one engine. */
export class EpisodeRunner {
  readonly slots: Semaphore;
  private readonly o: Required<Omit<EpisodeRunnerOptions, 'gateway'>> &
    Pick<EpisodeRunnerOptions, 'gateway'>;
  private seq = 0;

  constructor(o: EpisodeRunnerOptions) {
    this.o = { maxConcurrent: 128, episodeTimeoutMs: 0, turnDiscount: 1, ...o };
    if (o.agent.kind === 'agent' && !o.gateway)
      throw new InvalidArgumentError('an agent(sample, env) file needs a gateway');
    this.slots = new Semaphore(this.o.maxConcurrent);
  }

  /** Episodes running now. */
  get running(): number {
    return this.slots.inUse;
  }

  /** Runs every episode of `sample`'s group (n step-function or agent episodes, or one workflow call). */
  async runGroup(engine: InferenceEngine, sample: Sample): Promise<GroupResult> {
    const { agent } = this.o;
    const base = { index: sample.index, groupId: sample.groupId };
    if (agent.kind === 'workflow') {
      const r = await this.episode(sample, () =>
        runWorkflowEpisode(engine, sample, agent.file, agent.workflow),
      );
      if (r instanceof Error)
        return { ...base, status: 'failed', trajectories: [], errors: [r.message], episodes: 1 };
      if (r === null)
        return { ...base, status: 'rejected', trajectories: [], errors: [], episodes: 1 };
      return { ...base, status: 'ok', trajectories: r, errors: [], episodes: 1 };
    }
    if (agent.kind === 'agent') {
      const runs = await Promise.all(
        Array.from({ length: sample.nSamples }, () =>
          this.episode(sample, (signal) =>
            runGatewayEpisode(sample, {
              file: agent.file,
              agent: agent.agent,
              gateway: this.o.gateway!,
              signal,
              turnDiscount: this.o.turnDiscount,
            }),
          ),
        ),
      );
      const errors = runs.filter((r): r is Error => r instanceof Error).map((e) => e.message);
      if (errors.length > 0)
        return { ...base, status: 'failed', trajectories: [], errors, episodes: runs.length };
      return {
        ...base,
        status: 'ok',
        trajectories: (runs as Trajectory[][]).flat(),
        errors: [],
        episodes: runs.length,
      };
    }
    const runs = await Promise.all(
      Array.from({ length: sample.nSamples }, () =>
        this.episode(sample, () =>
          runStepEpisode(engine, sample, {
            file: agent.file,
            step: agent.step,
            maxTurns: agent.maxTurns,
            tokenizer: this.o.tokenizer,
            gconfig: this.o.gconfig,
            maxLength: this.o.maxLength,
            rid: `${sample.groupId}-${this.seq++}`,
          }),
        ),
      ),
    );
    const errors = runs.filter((r): r is Error => r instanceof Error).map((e) => e.message);
    if (errors.length > 0) {
      return { ...base, status: 'failed', trajectories: [], errors, episodes: runs.length };
    }
    return {
      ...base,
      status: 'ok',
      trajectories: runs as Trajectory[],
      errors: [],
      episodes: runs.length,
    };
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
