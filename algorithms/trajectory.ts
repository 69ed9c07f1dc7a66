/**
 * The trajectory: what every rollout path (step-function agents, workflows, ReMax) produces and
 * what experience making consumes. One record per sampled sequence.
 *
 * @module
 */
import type { AgentTrace } from '../runtime/agent-trace.ts';

/**
 * One episode's token sequence. `inputIds`, `lossMask`, `logprobs` and `versions` have the same
 * length; position i describes token i.
 *
 * @example
 * // prompt [5, 6], generated [7, 8]
 * { inputIds: [5, 6, 7, 8], lossMask: [0, 0, 1, 1], logprobs: [0, 0, -0.3, -1.2],
 *   versions: [-1, -1, 3, 3], reward: 1, groupId: 'p17', truncated: false }
 */
export interface Trajectory {
  /** Prompt, generated and environment tokens, in order. */
  inputIds: number[];
  /** 1 for tokens the policy generated (trained on), 0 for prompt and environment tokens. */
  lossMask: number[];
  /** Behaviour logprob of each generated token; 0 elsewhere. */
  logprobs: number[];
  /** Policy version that generated each token; -1 for prompt and environment tokens. */
  versions: number[];
  /** Scalar episode reward (for multi-turn: the sum, unless `turnRewards` is used). */
  reward: number;
  /** Optional per-turn rewards, each placed on the last token of its turn. */
  turnRewards?: { index: number; reward: number }[];
  /** Trajectories from the same prompt share a group id (GRPO, RLOO, ...). */
  groupId: string;
  /** Index of the prompt in the dataset (for exactly-once accounting and resume). */
  promptIndex?: number;
  /** True when generation hit the length limit rather than a stop token. */
  truncated: boolean;
  /** Free-form scalars the agent reports (logged as metrics). */
  info?: Record<string, number | string | boolean>;
  /** A gateway agent's own OpenTelemetry trace joined to its model calls (bounded). */
  trace?: AgentTrace;
}

/** The prefix of the `info` keys the gateway adds to an agent's own (`gateway_completions`, …). */
export const gatewayInfoPrefix = 'gateway_';

/**
 * The step's means of what agents report in `info` (a step function's or a black-box agent's
 * `extraInfo`): each numeric or boolean key becomes `info/<key>`, averaged over the trajectories
 * that carry it. Strings are not averaged. The gateway's own bookkeeping beside them
 * (`gateway_<name>`, added by the agent executor) goes to `gateway/<name>`, apart from the user's
 * metrics, as trackers keep system metrics apart.
 *
 * @example
 * infoMetrics([{ info: { used_tool: 1 } }, { info: { used_tool: 0 } }])   // { 'info/used_tool': 0.5 }
 * infoMetrics([{ info: { gateway_completions: 2 } }])                   // { 'gateway/completions': 2 }
 */
export function infoMetrics(
  trajectories: readonly Pick<Trajectory, 'info'>[],
): Record<string, number> {
  const sums = new Map<string, { sum: number; n: number }>();
  for (const t of trajectories) {
    for (const [k, v] of Object.entries(t.info ?? {})) {
      if (typeof v === 'string') continue;
      const x = typeof v === 'boolean' ? Number(v) : v;
      if (!Number.isFinite(x)) continue;
      const s = sums.get(k) ?? { sum: 0, n: 0 };
      s.sum += x;
      s.n++;
      sums.set(k, s);
    }
  }
  const name = (k: string): string =>
    k.startsWith(gatewayInfoPrefix) ? `gateway/${k.slice(gatewayInfoPrefix.length)}` : `info/${k}`;
  return Object.fromEntries([...sums].map(([k, s]) => [name(k), s.sum / s.n]));
}
