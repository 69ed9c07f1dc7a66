/**
 * What a step's episodes say beyond the trained batch, from the rollouts' group reports
 * (`roles/episode-report.ts`; the driver never sees a token): the standard per-step episode
 * metrics (reward spread, groups with no reward spread, response lengths, how many hit the length
 * cap, the agent's `extraInfo` averaged) and a bounded set of sample episodes — the best, the
 * worst and a random draw among the candidates the rollouts described — that the dashboard's
 * Samples view and `rtjob samples` show.
 *
 * @module
 */
import { infoMetrics } from '../../algorithms/trajectory.ts';
import {
  pickSamples,
  type EpisodeSample,
  type EpisodeStat,
  type GroupReport,
} from '../../roles/episode-report.ts';
import type { RunContext } from './run-state.ts';

/** The head keeps at most 256 samples a step; two places are left for failed episodes. */
export const maxSamplesPerStep = 250;

/**
 * Sample candidates each group's rollout describes so that a step of `groups` groups can pick
 * `--log-samples N` among them (0 when no samples are logged): the group's share of N; the
 * rollout adds the group's best and worst.
 */
export function samplesPerGroup(logSamples: number, groups: number): number {
  const n = Math.min(logSamples, maxSamplesPerStep);
  return n > 0 ? Math.ceil(n / Math.max(1, groups)) : 0;
}

/**
 * The sample episodes of one step: up to `n` of the candidates the groups that ran described
 * (best, worst, random by {@link pickSamples}), plus up to two failed groups with their errors.
 * `trainerVersion` (undefined on-policy) sets each sample's staleness.
 */
export function sampleEpisodes(
  reports: readonly GroupReport[],
  n: number,
  c: { trainerVersion?: number; seed: number },
): EpisodeSample[] {
  if (n <= 0) return [];
  const all = reports.filter((g) => g.status === 'ok').flatMap((g) => g.samples);
  const picks = pickSamples(
    all.map((s) => s.score ?? 0),
    n,
    c.seed,
  );
  const out = picks.map(({ index, pick }): EpisodeSample => {
    const s = all[index]!;
    const stale =
      c.trainerVersion !== undefined && s.versionMin !== undefined
        ? Math.max(0, c.trainerVersion - s.versionMin)
        : 0;
    return { ...s, pick, staleness: stale };
  });
  const failed = reports.filter((g) => g.status === 'failed').flatMap((g) => g.samples);
  return [...out, ...failed.slice(0, 2)];
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
export function episodeMetrics(reports: readonly GroupReport[]): Record<string, number> {
  const ok = reports.filter((g) => g.status === 'ok' && g.trajectories.length > 0);
  const ts: EpisodeStat[] = ok.flatMap((g) => g.trajectories);
  if (ts.length === 0) return {};
  const rewards = ts.map((t) => t.reward);
  const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
  const std = Math.sqrt(rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / rewards.length);
  const flat = ok.filter((g) =>
    g.trajectories.every((t) => t.reward === g.trajectories[0]!.reward),
  ).length;
  const lengths = ts.map((t) => t.responseTokens);
  const out: Record<string, number> = {
    tokens: lengths.reduce((a, b) => a + b, 0),
    reward_std: std,
    zero_std_groups: flat / ok.length,
    response_length_max: Math.max(...lengths),
    response_clip_ratio: ts.filter((t) => t.truncated).length / ts.length,
    version_span_max: Math.max(...ts.map((t) => (t.versionMax ?? 0) - (t.versionMin ?? 0))),
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
  reports: readonly GroupReport[],
  trainerVersion?: number,
): Record<string, number> {
  const { o, state, log } = ctx;
  const m = episodeMetrics(reports);
  // Cumulative, so a chart can put tokens on its x axis (compute-fair comparisons of runs).
  state.tokensTotal = (state.tokensTotal ?? 0) + (m.tokens ?? 0);
  const failedEpisodes = reports.reduce(
    (a, g) => a + (g.status === 'failed' ? g.errors.length : 0),
    0,
  );
  const metrics = {
    ...m,
    tokens_total: state.tokensTotal,
    episodes: reports.reduce((a, g) => a + g.episodes, 0),
    episodes_failed_step: failedEpisodes,
  };
  if (o.logSamples <= 0 || !log.samples) return metrics;
  const samples = sampleEpisodes(reports, Math.min(o.logSamples, maxSamplesPerStep), {
    ...(trainerVersion !== undefined ? { trainerVersion } : {}),
    seed: o.seed * 1000003 + state.step,
  });
  log.samples(state.step, samples);
  return metrics;
}
