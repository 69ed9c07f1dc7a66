/**
 * One sample episode as train_ppo keeps it with its job (`--log-samples`): the turns as text,
 * why it was kept, its reward and versions. Built by `episodes.ts`, stored through the run's log.
 *
 * @module
 */
import type { ParsedToolCall } from '../../gateway/tool-parsers.ts';
import type { AgentTrace } from '../../runtime/agent-trace.ts';

/** One turn of a sample episode. */
export interface SampleTurn {
  /** `assistant`: generated (trained on); `tool`: the result of the assistant's tool calls; `environment`: other feedback. */
  role: 'assistant' | 'tool' | 'environment';
  text: string;
  tokens: number;
  /** Tool calls parsed from an assistant turn (`--tool-call-parser`). */
  toolCalls?: ParsedToolCall[];
}

/** One sample episode as stored with the job (`GET /api/jobs/:id/samples`). */
export interface EpisodeSample {
  /** The prompt's dataset index: the same prompt across steps. */
  key: string;
  /** Why this episode was kept. */
  pick: 'best' | 'worst' | 'random' | 'failed';
  reward?: number;
  prompt: string;
  label?: string;
  turns: SampleTurn[];
  extraInfo?: Record<string, number | string | boolean>;
  /** Policy versions that generated its tokens. */
  versionMin?: number;
  versionMax?: number;
  /** Trainer version at training minus the oldest token's version (0 on-policy). */
  staleness?: number;
  /** `length`: the length cap ended it; `tool_calls`: it ended on a tool call; else `stop`. */
  stopReason?: 'stop' | 'length' | 'tool_calls';
  promptTokens?: number;
  responseTokens?: number;
  groupId: string;
  /** Mean reward of its group (the baseline it was compared with). */
  groupRewardMean?: number;
  /** A failed episode's error. */
  error?: string;
  /** A gateway agent's own OpenTelemetry spans joined to its model calls (`gateway/README.md`). */
  trace?: AgentTrace;
}
