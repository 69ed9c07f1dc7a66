/**
 * What a rollout says about one group besides its tokens, built where the tokenizer, the prompt
 * and the tool-call parser already are: one small record per episode (reward, generated tokens,
 * length cap, versions, the agent's `extraInfo`), and sample episodes decoded to text with their
 * turns and parsed tool calls (`--log-samples`). The trajectories themselves go by reference
 * (`handoff.ts`); the driver reads only this report, so it never decodes or parses again.
 *
 * @module
 */
import type { GroupResult } from '../agents/episode-runner.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';
import { parseCompletion, toolCallParser, type ParsedToolCall } from '../gateway/tool-parsers.ts';
import { seededRandom } from '../model/sampling.ts';
import type { Handoff } from './handoff.ts';
import type { AgentTrace } from '../runtime/agent-trace.ts';

/** Longest text kept per turn; the middle of a longer one is cut. */
export const maxTurnChars = 4000;
/** Most turns kept per sample; the middle ones are cut. */
export const maxTurns = 24;

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
  /** Its reward: the head filters and ranks samples by their `score` (train_ppo's report names it). */
  score?: number;
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
  groupScoreMean?: number;
  /** A failed episode's error. */
  error?: string;
  /** A gateway agent's own OpenTelemetry spans joined to its model calls (`gateway/README.md`). */
  trace?: AgentTrace;
}

/** One episode (trajectory) of a group, without its tokens. */
export interface EpisodeStat {
  reward: number;
  /** Generated (trained) tokens. */
  responseTokens: number;
  /** The length cap ended it. */
  truncated: boolean;
  /** Oldest and newest weight version among its generated tokens (absent when it has none). */
  versionMin?: number;
  versionMax?: number;
  info?: Record<string, number | string | boolean>;
}

/** What `Rollout.runGroup` returns: a group's outcome, its episodes' records, and its batch. */
export interface GroupReport {
  index: number;
  groupId: string;
  /** `ok`: trajectories in `batch`; `rejected`: the workflow returned none; `failed`: an episode threw or timed out. */
  status: GroupResult['status'];
  /** Episode error messages of a failed group. */
  errors: string[];
  /** Episodes the group ran (or tried). */
  episodes: number;
  /** One record per trajectory, in the order of `batch`. */
  trajectories: EpisodeStat[];
  /** Sample candidates (`--log-samples`): the group's best, worst and a seeded random few, or its failure. */
  samples: EpisodeSample[];
  /** The trajectories, put once by the rollout (absent when the group has none). */
  batch?: Handoff<Trajectory[]>;
}

/** How a rollout describes a group. */
export interface ReportOptions {
  /** Text of token ids (special tokens dropped). */
  decode(ids: number[]): string;
  /** `--tool-call-parser`. @default 'hermes' */
  toolCallParser?: string;
  /** The prompt as the dataset gave it. */
  prompt: string;
  label?: string;
  /** Sample episodes to describe beyond the group's best and worst (0: none at all). @default 0 */
  samples?: number;
  /** Seeds the random sample candidates. @default 0 */
  seed?: number;
}

/**
 * Picks up to `n` trajectories: a quarter (rounded up) with the highest reward, a quarter with
 * the lowest, the rest at random (seeded) from what is left. Only an episode above the lowest
 * reward counts as best, and only one below the highest as worst. Returns indices into `rewards`.
 */
export function pickSamples(
  rewards: readonly number[],
  n: number,
  seed: number,
): { index: number; pick: 'best' | 'worst' | 'random' }[] {
  if (n <= 0 || rewards.length === 0) return [];
  const order = rewards.map((_, i) => i).sort((a, b) => rewards[b]! - rewards[a]! || a - b);
  const out: { index: number; pick: 'best' | 'worst' | 'random' }[] = [];
  const taken = new Set<number>();
  const take = (index: number, pick: 'best' | 'worst' | 'random') => {
    if (out.length >= n || taken.has(index)) return;
    taken.add(index);
    out.push({ index, pick });
  };
  const quarter = Math.ceil(n / 4);
  const top = rewards[order[0]!]!;
  const bottom = rewards[order.at(-1)!]!;
  // "Best" beats the worst reward and "worst" trails the best one: ties are not labelled either.
  for (const i of order.filter((k) => rewards[k]! > bottom).slice(0, quarter)) take(i, 'best');
  for (const i of order
    .filter((k) => rewards[k]! < top)
    .reverse()
    .slice(0, quarter))
    take(i, 'worst');
  const rest = order.filter((i) => !taken.has(i));
  const rand = seededRandom(seed);
  while (out.length < n && rest.length > 0) {
    const k = Math.floor(rand() * rest.length);
    take(rest.splice(k, 1)[0]!, 'random');
  }
  return out;
}

/** Cuts the middle of a long text, saying how much went. */
export function clipText(text: string): string {
  if (text.length <= maxTurnChars) return text;
  const half = Math.floor(maxTurnChars / 2);
  return `${text.slice(0, half)}\n… [${text.length - 2 * half} characters cut] …\n${text.slice(-half)}`;
}

/**
 * Splits a trajectory into its turns by the loss mask (runs of generated tokens are assistant
 * turns; masked runs after the prompt are tool or environment feedback) and decodes each.
 */
export function episodeTurns(
  t: Trajectory,
  o: Pick<ReportOptions, 'decode' | 'toolCallParser'>,
): { turns: SampleTurn[]; promptTokens: number; responseTokens: number } {
  const parser = toolCallParser(o.toolCallParser ?? 'hermes');
  const first = t.lossMask.indexOf(1);
  const promptTokens = first < 0 ? t.inputIds.length : first;
  const turns: SampleTurn[] = [];
  let responseTokens = 0;
  let start = promptTokens;
  while (start < t.inputIds.length) {
    const generated = t.lossMask[start] === 1;
    let end = start;
    while (end < t.inputIds.length && (t.lossMask[end] === 1) === generated) end++;
    const ids = t.inputIds.slice(start, end);
    const text = o.decode(ids);
    if (generated) {
      responseTokens += ids.length;
      const calls = parseCompletion(parser, text).toolCalls;
      turns.push({
        role: 'assistant',
        text: clipText(text),
        tokens: ids.length,
        ...(calls.length ? { toolCalls: calls } : {}),
      });
    } else {
      const afterCall = (turns.at(-1)?.toolCalls?.length ?? 0) > 0;
      turns.push({
        role: afterCall ? 'tool' : 'environment',
        text: clipText(text),
        tokens: ids.length,
      });
    }
    start = end;
  }
  if (turns.length > maxTurns) {
    const cut = turns.length - maxTurns;
    turns.splice(maxTurns / 2, cut, {
      role: 'environment',
      text: `… [${cut} turns cut] …`,
      tokens: 0,
    });
  }
  return { turns, promptTokens, responseTokens };
}

/** A trajectory's record without its tokens. */
export function episodeStat(t: Trajectory): EpisodeStat {
  let lo = Infinity;
  let hi = -Infinity;
  let tokens = 0;
  for (let i = 0; i < t.lossMask.length; i++) {
    if (t.lossMask[i] !== 1) continue;
    tokens++;
    const v = t.versions[i]!;
    if (v < 0) continue;
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
  }
  return {
    reward: t.reward,
    responseTokens: tokens,
    truncated: t.truncated,
    ...(hi >= lo ? { versionMin: lo, versionMax: hi } : {}),
    ...(t.info ? { info: t.info } : {}),
  };
}

/** One trajectory as a sample episode (its `pick` and `staleness` are the driver's to set). */
function describe(
  t: Trajectory,
  stat: EpisodeStat,
  groupMean: number,
  o: ReportOptions,
  pick: EpisodeSample['pick'],
): EpisodeSample {
  const { turns, promptTokens, responseTokens } = episodeTurns(t, o);
  const lastAssistant = turns.filter((x) => x.role === 'assistant').at(-1);
  return {
    key: String(t.promptIndex ?? -1),
    pick,
    score: t.reward,
    prompt: clipText(o.prompt),
    ...(o.label !== undefined ? { label: clipText(o.label) } : {}),
    turns,
    ...(t.info ? { extraInfo: t.info } : {}),
    ...(t.trace ? { trace: t.trace } : {}),
    ...(stat.versionMin !== undefined
      ? { versionMin: stat.versionMin, versionMax: stat.versionMax }
      : {}),
    stopReason: t.truncated ? 'length' : lastAssistant?.toolCalls?.length ? 'tool_calls' : 'stop',
    promptTokens,
    responseTokens,
    groupId: t.groupId,
    groupScoreMean: groupMean,
  };
}

/**
 * The report of one group, without its batch: a record per trajectory and, with `o.samples` > 0,
 * sample candidates (up to `o.samples + 2` picked as {@link pickSamples} picks, so the group's best
 * and worst are always among them), or a failed group's first error as a sample.
 */
export function groupReport(g: GroupResult, o: ReportOptions): Omit<GroupReport, 'batch'> {
  const trajectories = g.trajectories.map(episodeStat);
  const n = o.samples ?? 0;
  const base = {
    index: g.index,
    groupId: g.groupId,
    status: g.status,
    errors: g.errors,
    episodes: g.episodes,
    trajectories,
  };
  if (n <= 0) return { ...base, samples: [] };
  if (g.status === 'failed') {
    const failed: EpisodeSample = {
      key: String(g.index),
      pick: 'failed',
      prompt: clipText(o.prompt),
      ...(o.label !== undefined ? { label: clipText(o.label) } : {}),
      turns: [],
      groupId: g.groupId,
      error: clipText(g.errors[0] ?? 'failed'),
    };
    return { ...base, samples: [failed] };
  }
  const rewards = trajectories.map((t) => t.reward);
  const mean = rewards.reduce((a, b) => a + b, 0) / Math.max(1, rewards.length);
  const picks = pickSamples(rewards, n + 2, o.seed ?? 0);
  const samples = picks.map(({ index, pick }) =>
    describe(g.trajectories[index]!, trajectories[index]!, mean, o, pick),
  );
  return { ...base, samples };
}
