/**
 * Held-out evaluation of a black-box agent (`export async function agent(sample, env)`): the agent
 * itself runs on each held-out sample, all of its turns through a gateway that decodes greedily,
 * and an episode is right when its reward reaches 1 (the math reward's right answer). What the
 * agent reports in `extraInfo` is averaged too (e.g. how often greedy decoding calls a tool).
 * `train_ppo` evaluates gateway agents this way; `eval_agent` does it for a model directory.
 *
 * @module
 */
import { infoMetrics } from '../../algorithms/trajectory.ts';
import type { Gateway } from '../gateway/server.ts';
import { runGatewayEpisode } from './agent-executor.ts';
import type { AgentFunction, Sample } from './types.ts';

/** One evaluated episode. */
export interface AgentEvalEpisode {
  index: number;
  reward: number;
  info: Record<string, number | string | boolean>;
  /** The episode's tokens (its first trajectory) and which of them the model generated. */
  inputIds: number[];
  lossMask: number[];
  /** Why the episode failed (it then counts as wrong). */
  error?: string;
}

/** What {@link evaluateAgent} measures. */
export interface AgentEvalResult {
  correct: number;
  total: number;
  /** Episodes that threw or timed out (counted as wrong). */
  failed: number;
  /** `info_<key>` means over the episodes that finished. */
  info: Record<string, number>;
  episodes: AgentEvalEpisode[];
}

/**
 * Runs `agent` once per sample on `gateway` (which should decode greedily: `fixedSampling`
 * temperature 0) and counts the episodes whose reward is at least 1. Failed episodes count as
 * wrong, never abort the evaluation.
 */
export async function evaluateAgent(
  agent: { file: string; agent: AgentFunction },
  gateway: Gateway,
  samples: Sample[],
  o: { timeoutMs?: number } = {},
): Promise<AgentEvalResult> {
  const episodes = await Promise.all(
    samples.map(async (sample): Promise<AgentEvalEpisode> => {
      const signal = o.timeoutMs ? AbortSignal.timeout(o.timeoutMs) : new AbortController().signal;
      try {
        const [t] = await runGatewayEpisode(sample, { file: agent.file, agent: agent.agent, gateway, signal });
        return { index: sample.index, reward: t?.reward ?? 0, info: t?.info ?? {}, inputIds: t?.inputIds ?? [], lossMask: t?.lossMask ?? [] };
      } catch (err) {
        return { index: sample.index, reward: 0, info: {}, inputIds: [], lossMask: [], error: err instanceof Error ? err.message : String(err) };
      }
    }),
  );
  const ok = episodes.filter((e) => e.error === undefined);
  return {
    correct: episodes.filter((e) => e.reward >= 1).length,
    total: episodes.length,
    failed: episodes.length - ok.length,
    info: infoMetrics(ok),
    episodes,
  };
}
