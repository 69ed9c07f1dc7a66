/**
 * What a step's episodes say beyond the trained batch: the standard per-step episode metrics
 * (reward spread, groups with no reward spread, response lengths, how many hit the length cap,
 * the agent's `extraInfo` averaged) and a bounded set of sample episodes — the best, the worst and
 * a random draw, decoded to text with turn boundaries and tool calls — that the dashboard's
 * Samples view and `rtjob samples` show.
 *
 * @module
 */
import type { GroupResult } from '../../agents/episode-runner.ts';
import { parseCompletion, toolCallParser } from '../../gateway/tool-parsers.ts';
import { seededRandom } from '../../model/sampling.ts';
import { loadTokenizer } from '../../model/tokenizer.ts';
import { infoMetrics, type Trajectory } from '../../algorithms/trajectory.ts';
import type { EpisodeSample, SampleTurn } from './episode-sample.ts';
import type { RunContext } from './run-state.ts';

/** Longest text kept per turn; the middle of a longer one is cut. */
export const maxTurnChars = 4000;
/** Most turns kept per sample; the middle ones are cut. */
export const maxTurns = 24;

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
function clip(text: string): string {
  if (text.length <= maxTurnChars) return text;
  const half = Math.floor(maxTurnChars / 2);
  return `${text.slice(0, half)}\n… [${text.length - 2 * half} characters cut] …\n${text.slice(-half)}`;
}

/** What describing an episode needs from the run. */
export interface DescribeOptions {
  decode(ids: number[]): string;
  /** `--tool-call-parser`. @default 'hermes' */
  toolCallParser?: string;
}

/**
 * Splits a trajectory into its turns by the loss mask (runs of generated tokens are assistant
 * turns; masked runs after the prompt are tool or environment feedback) and decodes each.
 */
export function episodeTurns(
  t: Trajectory,
  o: DescribeOptions,
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
        text: clip(text),
        tokens: ids.length,
        ...(calls.length ? { toolCalls: calls } : {}),
      });
    } else {
      const afterCall = (turns.at(-1)?.toolCalls?.length ?? 0) > 0;
      turns.push({
        role: afterCall ? 'tool' : 'environment',
        text: clip(text),
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

/** A step's episodes in one list, each with its group's mean reward. */
function episodesOf(groups: readonly GroupResult[]): { t: Trajectory; groupMean: number }[] {
  return groups.flatMap((g) => {
    const mean =
      g.trajectories.reduce((a, t) => a + t.reward, 0) / Math.max(1, g.trajectories.length);
    return g.trajectories.map((t) => ({ t, groupMean: mean }));
  });
}

/** The context {@link sampleEpisodes} describes episodes in. */
export interface SampleContext extends DescribeOptions {
  /** Prompt text and label of a dataset index. */
  prompt(index: number): { prompt: string; label?: string };
  /** The trainer's version when this batch was trained; undefined on-policy (staleness 0). */
  trainerVersion?: number;
  seed: number;
}

/**
 * The sample episodes of one step: up to `n` of the groups that ran (best, worst, random), plus
 * up to two failed episodes with their errors.
 */
export function sampleEpisodes(
  groups: readonly GroupResult[],
  n: number,
  c: SampleContext,
): EpisodeSample[] {
  if (n <= 0) return [];
  const all = episodesOf(groups.filter((g) => g.status === 'ok'));
  const picks = pickSamples(
    all.map((e) => e.t.reward),
    n,
    c.seed,
  );
  const out: EpisodeSample[] = picks.map(({ index, pick }) => {
    const { t, groupMean } = all[index]!;
    const { turns, promptTokens, responseTokens } = episodeTurns(t, c);
    const versions = t.versions.filter((v, i) => t.lossMask[i] === 1 && v >= 0);
    const vMin = versions.length ? Math.min(...versions) : undefined;
    const vMax = versions.length ? Math.max(...versions) : undefined;
    const promptIndex = t.promptIndex ?? -1;
    const p = c.prompt(promptIndex);
    const lastAssistant = turns.filter((x) => x.role === 'assistant').at(-1);
    return {
      key: String(promptIndex),
      pick,
      reward: t.reward,
      prompt: clip(p.prompt),
      ...(p.label !== undefined ? { label: clip(p.label) } : {}),
      turns,
      ...(t.info ? { extraInfo: t.info } : {}),
      ...(t.trace ? { trace: t.trace } : {}),
      ...(vMin !== undefined ? { versionMin: vMin, versionMax: vMax } : {}),
      staleness:
        c.trainerVersion !== undefined && vMin !== undefined
          ? Math.max(0, c.trainerVersion - vMin)
          : 0,
      stopReason: t.truncated ? 'length' : lastAssistant?.toolCalls?.length ? 'tool_calls' : 'stop',
      promptTokens,
      responseTokens,
      groupId: t.groupId,
      groupRewardMean: groupMean,
    };
  });
  for (const g of groups.filter((x) => x.status === 'failed').slice(0, 2)) {
    const p = c.prompt(g.index);
    out.push({
      key: String(g.index),
      pick: 'failed',
      prompt: clip(p.prompt),
      ...(p.label !== undefined ? { label: clip(p.label) } : {}),
      turns: [],
      groupId: g.groupId,
      error: clip(g.errors[0] ?? 'failed'),
    });
  }
  return out;
}

/**
 * Per-step episode metrics every RL dashboard shows: generated tokens, reward spread, the fraction
 * of groups whose episodes all scored the same (they teach group-baseline methods nothing),
 * response lengths, the fraction cut by the length cap, each numeric or boolean `extraInfo` field
 * averaged over the step's finished episodes (`info/<name>`, the library's `infoMetrics`), and for
 * gateway agents `trajectory_breaks`: the step's requests that started a new trajectory where one
 * was there to continue (`gateway/bridge.ts`). `version_span_max` is the most weight versions one
 * trained sequence's tokens lie apart: 0 where weights change only between batches (sync, and
 * async without `--partial-rollout`), up to the staleness bound where an update may land
 * mid-episode (gateway/README.md, "Weight updates mid-episode").
 */
export function episodeMetrics(groups: readonly GroupResult[]): Record<string, number> {
  const ok = groups.filter((g) => g.status === 'ok' && g.trajectories.length > 0);
  const ts = ok.flatMap((g) => g.trajectories);
  if (ts.length === 0) return {};
  const rewards = ts.map((t) => t.reward);
  const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
  const std = Math.sqrt(rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / rewards.length);
  const flat = ok.filter((g) =>
    g.trajectories.every((t) => t.reward === g.trajectories[0]!.reward),
  ).length;
  const lengths = ts.map((t) => t.lossMask.reduce((a, b) => a + b, 0));
  const out: Record<string, number> = {
    tokens: lengths.reduce((a, b) => a + b, 0),
    reward_std: std,
    zero_std_groups: flat / ok.length,
    response_length_max: Math.max(...lengths),
    response_clip_ratio: ts.filter((t) => t.truncated).length / ts.length,
    version_span_max: Math.max(...ts.map(versionSpan)),
  };
  const breaks = ts.reduce((n, t) => {
    // Every trajectory of an episode carries the episode's count: each adds its share of it.
    const b = t.info?.['gateway_trajectory_breaks'];
    const of = t.info?.['gateway_trajectories'];
    return typeof b === 'number' && typeof of === 'number' && of > 0 ? n + b / of : n;
  }, 0);
  if (ts.some((t) => t.info?.['gateway_trajectory_breaks'] !== undefined))
    out['trajectory_breaks'] = Math.round(breaks);
  return { ...out, ...infoMetrics(ts) };
}

/**
 * Returns a step's episode metrics, for the loop to log with the rest of the step's once the step
 * is done (a step stopped part way leaves no row), and with `--log-samples N` (N > 0) logs its
 * sample episodes through the run's log (the head's samples API by default).
 */
export function recordEpisodes(
  ctx: RunContext,
  groups: readonly GroupResult[],
  trainerVersion?: number,
): Record<string, number> {
  const { o, state, log } = ctx;
  const m = episodeMetrics(groups);
  // Cumulative, so a chart can put tokens on its x axis (compute-fair comparisons of runs).
  state.tokensTotal = (state.tokensTotal ?? 0) + (m.tokens ?? 0);
  const failedEpisodes = groups.reduce(
    (a, g) => a + (g.status === 'failed' ? g.errors.length : 0),
    0,
  );
  const metrics = {
    ...m,
    tokens_total: state.tokensTotal,
    episodes: groups.reduce((a, g) => a + g.episodes, 0),
    episodes_failed_step: failedEpisodes,
  };
  if (o.logSamples <= 0 || !log.samples) return metrics;
  ctx.decode ??= decoderOf(o.pretrain);
  // The head keeps at most 256 a step; two places are left for failed episodes.
  const samples = sampleEpisodes(groups, Math.min(o.logSamples, 250), {
    decode: ctx.decode,
    toolCallParser: o.toolCallParser,
    prompt: (i) => {
      if (i < 0 || i >= ctx.sampler.size) return { prompt: '' };
      const it = ctx.sampler.item(i, '');
      return { prompt: it.prompt, ...(it.label !== undefined ? { label: it.label } : {}) };
    },
    ...(trainerVersion !== undefined ? { trainerVersion } : {}),
    seed: o.seed * 1000003 + state.step,
  });
  log.samples(state.step, samples);
  return metrics;
}

/** Text of token ids by the policy's tokenizer (special tokens dropped), loaded once per run. */
function decoderOf(pretrain: string): (ids: number[]) => string {
  const tok = loadTokenizer(pretrain);
  return (ids) => tok.decode(ids, { skipSpecialTokens: true });
}

/** Newest minus oldest version among a trajectory's trained tokens (0 when it has none). */
function versionSpan(t: Trajectory): number {
  let lo = Infinity;
  let hi = -Infinity;
  t.versions.forEach((v, i) => {
    if (t.lossMask[i] !== 1 || v < 0) return;
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
  });
  return hi >= lo ? hi - lo : 0;
}
