/**
 * The Rollout role: wraps one inference engine, loads the user's agent file inside its worker, and
 * runs agent episodes against the engine with at most ASYNC_NUM_TASKS at once. Every generated
 * token carries its behaviour logprob and the version of the weights that produced it. Also runs
 * the held-out evaluation (greedy, single turn, math reward).
 *
 * @module
 */
import { backendDescription } from '../model/backend.ts';
import { put, release, type ObjectRef } from '../runtime/api.ts';
import { RtjobError } from '../runtime/errors.ts';
import { runGatewayEvaluation } from '../agents/agent-executor.ts';
import { EpisodeRunner, type GroupResult } from '../agents/episode-runner.ts';
import { agentKind } from '../agents/kinds.ts';
import { loadAgent } from '../agents/load.ts';
import type { Agent, AgentTokenizer, Sample } from '../agents/types.ts';
import { BuiltinEngine } from '../engines/builtin/engine.ts';
import { Gateway } from '../gateway/server.ts';
import { modelCard } from '../gateway/model-card.ts';
import type {
  GenerationConfig,
  InferenceEngine,
  PauseOptions,
  PolicyWeights,
} from '../engines/types.ts';
import { policyWeightUpdate } from '../engines/types.ts';
import { weightsDigest } from '../model/digest.ts';
import { loadTokenizer, type ChatMessage, type ChatTokenizer } from '../model/tokenizer.ts';
import { defaultAgent, mathReward, remoteRewardAgent } from './reward.ts';
import { RemoteRewardClient, type RemoteRewardOptions } from '../rewards/remote.ts';
import { EngineError } from '../engines/http/errors.ts';
import type { LaunchedServer } from '../engines/launcher.ts';
import {
  createRolloutEngine,
  rolloutConcurrency,
  type RolloutEngineInit,
} from './rollout-engine.ts';
import { groupReport, type GroupReport } from './episode-report.ts';
import { handOff } from './handoff.ts';

/** One prompt as the driver sends it; the rollout tokenizes it. */
export interface PromptItem {
  index: number;
  /** The prompt's text; of a conversation, its last user message (for reports). */
  prompt: string;
  /** A conversation prompt (`[{role, content}]`), rendered whole with the chat template. */
  messages?: ChatMessage[];
  label?: string;
  groupId: string;
  record?: Record<string, unknown>;
}

/** How a Rollout is built. */
export interface RolloutInit extends RolloutEngineInit {
  /** Agent file; the built-in single-turn math reward when unset. */
  agentFunc?: string;
  /** Without an agent file: score each answer with these remote reward services instead. */
  remoteReward?: RemoteRewardOptions;
  temperature?: number;
  topP?: number;
  applyChatTemplate?: boolean;
  nSamplesPerPrompt: number;
  /** @default 0 (none) */
  episodeTimeoutMs?: number;
  /** Tool-call format of the gateway agents talk to (`--tool-call-parser`). @default 'hermes' */
  toolCallParser?: string;
  /** Check every gateway turn against the re-rendered prompt and report drift. @default false */
  gatewayCheckDrift?: boolean;
  /** Bridge mode of the gateway (`gateway/bridge.ts`). @default true */
  gatewayBridge?: boolean;
  /** Reward factor per completion before a gateway episode's last. @default 1 */
  agentTurnDiscount?: number;
}

/**
 * The rollout's engine holds older weights than the caller expects: its process was restarted
 * (outside any call) and came back with the pretrained weights. The driver re-initialises it
 * (pushes the current weights) and sends the call again. Checked by `code`.
 */
export class StaleRolloutError extends RtjobError<'ROLLOUT_STALE'> {
  override get name(): string {
    return 'StaleRolloutError';
  }

  constructor(
    readonly version: number,
    readonly expected: number,
  ) {
    super(
      'ROLLOUT_STALE',
      `the rollout's engine holds weights version ${version}, the run is at version ${expected}`,
    );
  }
}

/** What the driver expects of the rollout a call reaches. */
export interface RolloutExpect {
  /** The weights version the engine must hold at least; older fails with {@link StaleRolloutError}. */
  minVersion?: number;
}

/** What a {@link Rollout.runGroup} call asks besides the prompt. */
export interface RunGroupOptions extends RolloutExpect {
  /** Sample episodes to describe beyond the group's best and worst (`--log-samples`). @default 0 */
  samples?: number;
  /** Seeds the random sample candidates. @default 0 */
  seed?: number;
}

/** Counters a Rollout reports. */
export interface RolloutStats {
  version: number;
  episodesRunning: number;
  episodesDone: number;
  episodesFailed: number;
  generatedTokens: number;
  /** Milliseconds with at least one episode running. */
  busyMs: number;
}

/**
 * Runs agent episodes on one engine. {@link Rollout.ready} loads it; every method that needs the
 * engine loads it first too, so an incarnation the runtime restarted (a crash outside any call)
 * serves its first call — often a weight push — instead of failing on a missing engine.
 */
export class Rollout {
  private engine!: InferenceEngine;
  private tokenizer!: AgentTokenizer;
  private runner!: EpisodeRunner;
  private agent!: Agent;
  private gateway: Gateway | undefined;
  private loaded: Promise<void> | undefined;
  private readonly gconfig: GenerationConfig;
  private readonly counters = { done: 0, failed: 0, tokens: 0, busyMs: 0 };
  private active = 0;
  private busySince = 0;
  /** This engine's copy of the weights, shared with the other engines of its node. */
  private relayed: ObjectRef<PolicyWeights> | undefined;
  /** Weights fetched ahead of their load ({@link stageWeights}). */
  private staged: PolicyWeights | undefined;

  /** The server this rollout started (`engineLaunch`). */
  private server: LaunchedServer | undefined;
  /** The remote reward services' client (`remoteReward`). */
  private rewardClient: RemoteRewardClient | undefined;

  constructor(private readonly init: RolloutInit) {
    this.gconfig = {
      maxNewTokens: init.generateMaxLen,
      temperature: init.temperature ?? 1,
      topP: init.topP ?? 1,
    };
  }

  /** Loads the engine, the tokenizer and the agent file. */
  async ready(): Promise<{
    agent: string;
    kind: Agent['kind'];
    maxConcurrent: number;
    /** The TF.js backend of the builtin engine ('' where the engine computes elsewhere). */
    backend: string;
  }> {
    const maxConcurrent = rolloutConcurrency(this.init);
    this.loaded ??= (async () => {
      const chat = loadTokenizer(this.init.pretrain);
      this.tokenizer = agentTokenizer(chat);
      this.engine = await this.createEngine();
      const maxLength = this.init.promptMaxLen + this.init.generateMaxLen * 4;
      const agent = (this.agent = this.init.agentFunc
        ? await loadAgent(this.init.agentFunc, {
            tokenizer: this.tokenizer,
            gconfig: this.gconfig,
            nSamples: this.init.nSamplesPerPrompt,
            maxLength,
          })
        : this.init.remoteReward
          ? remoteRewardAgent(
              (this.rewardClient = new RemoteRewardClient(this.init.remoteReward)),
              this.init.remoteReward.urls,
            )
          : defaultAgent);
      if (agentKind(agent).needsGateway) {
        // Black-box agents reach the engine through an OpenAI-compatible gateway in this worker.
        const card = modelCard(this.init.pretrain);
        this.gateway = await Gateway.start({
          engine: this.engine,
          tokenizer: chat,
          model: card.name,
          contextLength: Math.min(card.contextLength ?? maxLength, maxLength),
          maxNewTokens: this.init.generateMaxLen,
          fixedSampling: {
            temperature: this.gconfig.temperature ?? 1,
            topP: this.gconfig.topP ?? 1,
          },
          toolCallParser: this.init.toolCallParser ?? 'hermes',
          checkDrift: this.init.gatewayCheckDrift ?? false,
          bridge: this.init.gatewayBridge ?? true,
        });
      }
      this.runner = new EpisodeRunner({
        agent,
        tokenizer: this.tokenizer,
        gconfig: this.gconfig,
        maxLength,
        maxConcurrent,
        episodeTimeoutMs: this.init.episodeTimeoutMs ?? 0,
        ...(this.gateway
          ? { gateway: this.gateway, turnDiscount: this.init.agentTurnDiscount ?? 1 }
          : {}),
      });
    })();
    await this.loaded;
    return {
      agent: this.agent.file,
      kind: this.agent.kind,
      maxConcurrent,
      backend: backendDescription(),
    };
  }

  private async createEngine(): Promise<InferenceEngine> {
    const { engine, server } = await createRolloutEngine(this.init);
    this.server = server;
    return engine;
  }

  /** The prompt as the agent sees it: tokenized (chat template when asked), tail-truncated. */
  sample(item: PromptItem): Sample {
    const ids =
      this.init.applyChatTemplate === false
        ? this.tokenizer.encode(item.prompt)
        : this.tokenizer.applyChatTemplate(
            item.messages ?? [{ role: 'user', content: item.prompt }],
          );
    const promptIds =
      ids.length > this.init.promptMaxLen ? ids.slice(ids.length - this.init.promptMaxLen) : ids;
    return {
      index: item.index,
      prompt: item.prompt,
      ...(item.label !== undefined ? { label: item.label } : {}),
      promptIds,
      nSamples: this.init.nSamplesPerPrompt,
      groupId: item.groupId,
      record: item.record ?? {},
    };
  }

  /**
   * Runs one prompt's group of episodes and reports it: the trajectories are put once in this
   * worker's object store (or kept as the value without a runtime) and the report carries their
   * handoff, with a record per episode and the sample episodes asked for, decoded here
   * (`episode-report.ts`). Contract errors (agent bugs) reject; so does an engine older than
   * `opts.minVersion` ({@link StaleRolloutError}), before any episode starts.
   */
  async runGroup(item: PromptItem, opts: RunGroupOptions = {}): Promise<GroupReport> {
    const g = await this.runEpisodes(item, opts);
    const report = groupReport(g, {
      decode: (ids) => this.tokenizer.decode(ids),
      toolCallParser: this.init.toolCallParser ?? 'hermes',
      prompt: item.prompt,
      ...(item.label !== undefined ? { label: item.label } : {}),
      samples: opts.samples ?? 0,
      seed: opts.seed ?? 0,
    });
    const trained = g.status === 'ok' && g.trajectories.length > 0;
    // An agent's trace is for its samples (in the report already): the roles that fetch the
    // batch to train on it would only carry it.
    const batch = g.trajectories.map((t) => {
      if (!t.trace) return t;
      const { trace: _trace, ...rest } = t;
      return rest;
    });
    return trained ? { ...report, batch: handOff(batch) } : report;
  }

  /** Runs many groups at once (bounded by ASYNC_NUM_TASKS inside), returning their trajectories by value. */
  runGroups(items: PromptItem[]): Promise<GroupResult[]> {
    return Promise.all(items.map((it) => this.runEpisodes(it)));
  }

  private async runEpisodes(item: PromptItem, expect: RolloutExpect = {}): Promise<GroupResult> {
    await this.ready();
    this.check(expect);
    if (this.active++ === 0) this.busySince = performance.now();
    try {
      const g = await this.runner.runGroup(this.engine, this.sample(item));
      // Episodes that threw or timed out; the rest of a failed group ran to the end.
      const failed = g.status === 'failed' ? Math.max(1, g.errors.length) : 0;
      this.counters.failed += failed;
      this.counters.done += g.episodes - failed;
      for (const t of g.trajectories) this.counters.tokens += t.lossMask.reduce((a, b) => a + b, 0);
      return g;
    } finally {
      if (--this.active === 0) this.counters.busyMs += performance.now() - this.busySince;
    }
  }

  /**
   * Greedy accuracy on held-out prompts: single-turn, scored by the math reward; for a black-box
   * agent (`agent(sample, env)`), its own episode with greedy decoding, correct when it returns
   * reward 1 (an episode that fails or runs past the timeout counts as wrong).
   */
  async evaluate(
    items: PromptItem[],
    expect: RolloutExpect = {},
  ): Promise<{ correct: number; total: number }> {
    await this.ready();
    this.check(expect);
    if (this.agent.kind === 'agent') return this.evaluateAgent(this.agent, items);
    const outs = await Promise.all(
      items.map(async (it) => {
        const s = this.sample(it);
        const r = await this.engine.generate({
          inputIds: s.promptIds,
          gconfig: { maxNewTokens: this.init.generateMaxLen, greedy: true },
        });
        return mathReward(this.tokenizer.decode(r.outputTokens), it.label);
      }),
    );
    return { correct: outs.filter((x) => x === 1).length, total: items.length };
  }

  private check(expect: RolloutExpect): void {
    const v = this.engine.getVersion();
    if (expect.minVersion !== undefined && v < expect.minVersion)
      throw new StaleRolloutError(v, expect.minVersion);
  }

  private async evaluateAgent(
    agent: Extract<Agent, { kind: 'agent' }>,
    items: PromptItem[],
  ): Promise<{ correct: number; total: number }> {
    const timeoutMs = this.init.episodeTimeoutMs ?? 0;
    const outs = await Promise.all(
      items.map((it) =>
        this.runner.slots.with(() => {
          const signal =
            timeoutMs > 0 ? AbortSignal.timeout(timeoutMs) : new AbortController().signal;
          const sample = { ...this.sample(it), nSamples: 1 };
          const run = runGatewayEvaluation(sample, {
            file: agent.file,
            agent: agent.agent,
            gateway: this.gateway!,
            signal,
          });
          // A hung evaluation episode is abandoned at the timeout, as in training.
          const timedOut = new Promise<Error>((resolve) =>
            signal.addEventListener('abort', () => resolve(new Error('timeout'))),
          );
          return timeoutMs > 0 ? Promise.race([run, timedOut]) : run;
        }),
      ),
    );
    return { correct: outs.filter((x) => x === 1).length, total: items.length };
  }

  /**
   * Loads new weights; later tokens carry `w.version`. The driver passes a ref the trainer owns
   * (`Trainer.shareWeights`), which this worker fetches from the trainer before the call runs.
   */
  async updateWeights(w: PolicyWeights): Promise<void> {
    await this.ready();
    await this.engine.updateWeights(policyWeightUpdate(w), w.version);
  }

  /**
   * Keeps `w` for {@link loadStaged}, without loading it. Passed the trainer's ref, this worker
   * fetches the bytes before the call runs: the async loop stages each version while the trainer
   * is idle, since a trainer busy with the next batch answers fetches only between its calls.
   */
  stageWeights(w: PolicyWeights): void {
    this.staged = w;
  }

  /**
   * Loads the weights {@link stageWeights} kept, if they are `version`; false when they are not
   * here (this process restarted since), and the caller loads them another way.
   */
  async loadStaged(version: number): Promise<boolean> {
    const w = this.staged;
    if (w?.version !== version) return false;
    await this.updateWeights(w);
    this.staged = undefined;
    return true;
  }

  /**
   * Loads `w` as {@link updateWeights} does (or stages it: `load` 'staged') and shares this copy: the other engines of this node
   * fetch the returned ref from here (one shared-memory file), so the weights cross to the node
   * once. The previous version's ref is released.
   */
  async relayWeights(
    w: PolicyWeights,
    load: 'now' | 'staged' = 'now',
  ): Promise<{ weights: ObjectRef<PolicyWeights> }> {
    if (load === 'now') await this.updateWeights(w);
    else this.stageWeights(w);
    if (this.relayed) release(this.relayed);
    this.relayed = put(w);
    // Wrapped: a bare ref as a result would be awaited (fetched) by the caller as a thenable.
    return { weights: this.relayed };
  }

  /**
   * The version and a SHA-256 of the weights the engine serves (builtin engine only), to check
   * engines against the trainer (`Trainer.weightsDigest`) without moving the weights.
   */
  async weightsDigest(): Promise<{ version: number; sha256: string }> {
    await this.ready();
    if (!(this.engine instanceof BuiltinEngine))
      throw new EngineError(
        'UNSUPPORTED',
        `weightsDigest: the ${this.engine.kind} engine does not export its weights`,
      );
    // A LoRA policy is its adapter (the trainer digests the same, `Trainer.weightsDigest`).
    const adapter = this.engine.exportAdapter();
    return {
      version: this.engine.getVersion(),
      sha256: weightsDigest(adapter ? adapter.tensors : this.engine.exportWeights()),
    };
  }

  async getVersion(): Promise<number> {
    await this.ready();
    return this.engine.getVersion();
  }

  async pause(opts?: PauseOptions): Promise<void> {
    await this.ready();
    return this.engine.pause(opts);
  }

  async resume(): Promise<void> {
    await this.ready();
    return this.engine.resume();
  }

  async sleep(): Promise<void> {
    await this.ready();
    return this.engine.sleep();
  }

  async wakeUp(): Promise<void> {
    await this.ready();
    return this.engine.wakeUp();
  }

  /**
   * Answers at once, loaded or not (a health probe: the driver restarts a rollout that does not
   * answer in time): the engine's version (-1 before it is loaded) and the episodes running.
   */
  health(): { version: number; episodesRunning: number } {
    return {
      version: this.engine ? this.engine.getVersion() : -1,
      episodesRunning: this.runner ? this.runner.running : 0,
    };
  }

  async stats(): Promise<RolloutStats> {
    await this.ready();
    const busy = this.counters.busyMs + (this.active > 0 ? performance.now() - this.busySince : 0);
    return {
      version: this.engine.getVersion(),
      episodesRunning: this.runner.running,
      episodesDone: this.counters.done,
      episodesFailed: this.counters.failed,
      generatedTokens: this.counters.tokens,
      busyMs: busy,
    };
  }

  async close(): Promise<void> {
    this.rewardClient?.close();
    await this.gateway?.close();
    await this.engine?.close();
    await this.server?.stop();
  }
}

/** The agent-facing view of a chat tokenizer (template rendered, then encoded). */
export function agentTokenizer(chat: ChatTokenizer): AgentTokenizer {
  const eos = chat.eosTokenId;
  return {
    ...(eos !== undefined ? { eosTokenId: eos } : {}),
    encode: (text, opts) => chat.encode(text, opts),
    decode: (ids, opts) => chat.decode(ids, { skipSpecialTokens: opts?.skipSpecialTokens ?? true }),
    applyChatTemplate: (messages, opts) => chat.encode(chat.applyChatTemplate(messages, opts)),
  };
}
