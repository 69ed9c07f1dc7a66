/**
 * The three agent APIs a user writes in `--agent-func FILE.ts`, and what the executors hand them.
 *
 * 1. A step function (OpenRLHF): `export async function step(observation, action, label, ctx)`.
 * 2. A workflow (AReaL): `export class Workflow { runEpisode(engine, sample) }`.
 * 3. A black-box agent: `export async function agent(sample, { baseURL, apiKey, model, signal })`
 *    that calls the rollout's OpenAI-compatible gateway with any client and returns a reward.
 *
 * The first two speak token ids to the engine; the third speaks chat, and the gateway records the
 * tokens.
 *
 * @module
 */
import type {
  GenerateRequest,
  GenerateResult,
  GenerationConfig,
  StopReason,
} from '../engines/types.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';

/** One chat message for `applyChatTemplate`. */
export interface ChatMessage {
  role: string;
  content: string;
}

/** The tokenizer an agent sees: the policy's own, so tokens round-trip. */
export interface AgentTokenizer {
  /** Token ids of `text`; special tokens (bos) are added only when asked. @default false */
  encode(text: string, opts?: { addSpecialTokens?: boolean }): number[];
  /** Text of `ids`; special tokens are dropped unless `skipSpecialTokens: false`. */
  decode(ids: number[], opts?: { skipSpecialTokens?: boolean }): string;
  /** Token ids of the rendered chat template (with the generation prompt by default). */
  applyChatTemplate(messages: ChatMessage[], opts?: { addGenerationPrompt?: boolean }): number[];
  /** End-of-sequence id, when the model has one. */
  readonly eosTokenId?: number;
}

/** One prompt of the dataset as the rollout sees it. */
export interface Sample {
  /** Position of the prompt in the dataset (exactly-once accounting, resume). */
  index: number;
  /** The prompt text (the `--input-key` field). */
  prompt: string;
  /** The label (the `--label-key` field), e.g. a gold solution ending `#### N`. */
  label?: string;
  /** Prompt token ids, chat template applied when `--apply-chat-template` is set. */
  promptIds: number[];
  /** Samples wanted for this prompt (`--n-samples-per-prompt`); workflows produce the group. */
  nSamples: number;
  /** Group id shared by every trajectory of this prompt. */
  groupId: string;
  /** The raw dataset record. */
  record: Record<string, unknown>;
}

/** What `ctx` gives a step function. A fresh `state` per episode: no globals shared across episodes. */
export interface StepContext<S extends object = Record<string, unknown>> {
  /** Turn index, 0 for the first action. */
  readonly turn: number;
  readonly tokenizer: AgentTokenizer;
  /** Per-episode scratch state, `{}` at the start of each episode. */
  readonly state: S;
  readonly sample: Sample;
  /** Why generation of this action stopped. */
  readonly stopReason: StopReason;
  /** Token ids of this action. */
  readonly actionIds: readonly number[];
}

/** What a step function returns. */
export interface StepResult {
  /** Reward of this turn; turns are summed onto the last action token. */
  reward: number;
  /** Text appended after the action (tokenized without special tokens, masked out of the loss). */
  environmentFeedback?: string;
  /** Token ids appended after the action; use instead of text to avoid re-tokenization drift. */
  environmentFeedbackIds?: number[];
  /** The whole next observation; it must extend `observation + action`, and the rest is the feedback. */
  nextObservation?: string;
  /** End the episode. */
  done: boolean;
  /** Scalars logged as metrics (the last turn's value wins). */
  extraInfo?: Record<string, number | string | boolean>;
  /** Sampling settings for the next turn. */
  gconfig?: GenerationConfig;
}

/** The OpenRLHF-style step function. */
export type StepFunction = (
  observation: string,
  action: string,
  label: string | undefined,
  ctx: StepContext,
) => Promise<StepResult> | StepResult;

/** The engine a workflow talks to: one sample per call, any number of calls, in parallel if it likes. */
export interface WorkflowEngine {
  generate(req: GenerateRequest): Promise<GenerateResult>;
  /** The version new tokens are tagged with. */
  getVersion(): number;
}

/** What a workflow's constructor receives. */
export interface WorkflowInit {
  tokenizer: AgentTokenizer;
  /** The job's sampling settings (`--temperature`, `--generate-max-len`). */
  gconfig: GenerationConfig;
  /** `--n-samples-per-prompt`. */
  nSamples: number;
  /** Context budget in tokens (prompt + generated + feedback). */
  maxLength: number;
}

/** The AReaL-style workflow: returns the trajectories of one prompt, or null to reject it. */
export interface Workflow {
  runEpisode(engine: WorkflowEngine, sample: Sample): Promise<Trajectory[] | Trajectory | null>;
}

/** What a black-box agent receives beside its sample: where its OpenAI-compatible model is. */
export interface AgentEnv {
  /** The gateway's base URL, ending in `/v1` (pass it to the client as `baseURL`). */
  baseURL: string;
  /** This episode's key; valid only while the episode runs. */
  apiKey: string;
  /** The model name to request. */
  model: string;
  /** Aborted when the episode times out (`--agent-timeout`); pass it to the client's calls. */
  signal: AbortSignal;
}

/** What a black-box agent returns: the episode's reward, with scalars to log when it likes. */
export type AgentResult =
  | number
  | { reward: number; extraInfo?: Record<string, number | string | boolean> };

/** The black-box agent: any code that calls an OpenAI-compatible endpoint and scores the episode. */
export type AgentFunction = (sample: Sample, env: AgentEnv) => Promise<AgentResult> | AgentResult;

/** A loaded agent file. */
export type Agent =
  | { kind: 'step'; file: string; step: StepFunction; maxTurns: number }
  | { kind: 'workflow'; file: string; workflow: Workflow }
  | { kind: 'agent'; file: string; agent: AgentFunction };
