/**
 * Runs one episode of a black-box agent (`export async function agent(sample, env)`): opens a
 * session on the rollout's gateway with a key of its own, hands the agent `{ baseURL, apiKey,
 * model, signal }`, and turns the tokens the gateway recorded into trajectories that share the
 * returned reward. The session is closed (its key revoked) however the episode ends.
 *
 * @module
 */
import type { Trajectory } from '../algorithms/trajectory.ts';
import type { Gateway } from '../gateway/server.ts';
import { AgentContractError, AgentNoModelCallError } from './errors.ts';
import type { AgentFunction, Sample } from './types.ts';

/** Settings of one gateway-agent episode. */
export interface GatewayEpisodeOptions {
  file: string;
  agent: AgentFunction;
  gateway: Gateway;
  /** Aborted when the episode times out. */
  signal: AbortSignal;
  /** Reward factor per completion before the last (`--agent-turn-discount`). @default 1 */
  turnDiscount?: number;
}

/** Runs the agent on `sample` and returns the trajectories of its completions. */
export async function runGatewayEpisode(
  sample: Sample,
  o: GatewayEpisodeOptions,
): Promise<Trajectory[]> {
  const s = o.gateway.openSession();
  // Revoke the key the moment the episode is given up, not when the abandoned agent returns.
  const onAbort = (): void => s.close();
  o.signal.addEventListener('abort', onAbort, { once: true });
  try {
    const env = {
      baseURL: o.gateway.baseURL,
      apiKey: s.apiKey,
      model: o.gateway.model,
      signal: o.signal,
    };
    const result = await Promise.resolve()
      .then(() => o.agent(sample, env))
      .catch((err: unknown) => {
        throw withGatewayHint(o.file, err, s.session.stats.completions);
      });
    const { reward, extraInfo } = checkAgentResult(o.file, result);
    s.close();
    const stats = s.session.stats;
    if (stats.completions === 0) {
      throw new AgentNoModelCallError(
        o.file,
        'the agent made no model call through the gateway (use env.baseURL and env.apiKey)',
      );
    }
    const info = {
      ...extraInfo,
      gateway_completions: stats.completions,
      gateway_trajectories: stats.trajectories,
      gateway_trajectory_breaks: stats.breaks.length,
      gateway_bridged: stats.bridged,
      gateway_aborted: stats.aborted,
      // Why the first break happened, shown with the episode's samples.
      ...(stats.breaks.length ? { gateway_break_reason: stats.breaks[0]!.reason } : {}),
      ...(stats.drift.length ? { gateway_drift: stats.drift.length } : {}),
      // The agent's own OpenTelemetry trace(s), from the W3C traceparent of its model calls.
      ...(s.session.traceIds.length ? { trace_id: s.session.traceIds.join(',') } : {}),
    };
    const trajectories = s.session.trajectories(
      reward,
      { groupId: sample.groupId, promptIndex: sample.index, info },
      o.turnDiscount ?? 1,
    );
    // The agent's exported spans joined to its model calls, on each of its trajectories.
    const trace = s.agentTrace();
    return trace ? trajectories.map((t) => ({ ...t, trace })) : trajectories;
  } finally {
    o.signal.removeEventListener('abort', onAbort);
    s.close();
  }
}

/** An error that says the agent's client is not the one the episode handed it. */
const notOurClient = /api.?key|credential|\b401\b|\b404\b|model_not_found|does not exist/i;

/**
 * An episode's error, with the way out when the agent failed before its first model call for
 * want of the episode's client settings (a hard-coded model name, OPENAI_API_KEY from the env).
 */
function withGatewayHint(file: string, err: unknown, completions: number): unknown {
  const message = err instanceof Error ? err.message : String(err);
  // The gateway's own 401 and 404 already say it.
  if (completions > 0 || !notOurClient.test(message) || /env\.\w/.test(message)) return err;
  return new AgentNoModelCallError(
    file,
    `${message} (an agent calls the model through the gateway: build its client from env.baseURL and env.apiKey, and pass env.model as the model)`,
    { cause: err },
  );
}

/**
 * Runs the agent on `sample` with greedy decoding and records nothing for training; resolves to
 * its reward, or to an error if the episode threw, timed out or returned a malformed value
 * (held-out evaluation: an episode that fails counts as wrong).
 */
export async function runGatewayEvaluation(
  sample: Sample,
  o: Omit<GatewayEpisodeOptions, 'turnDiscount'>,
): Promise<number | Error> {
  const s = o.gateway.openSession({ fixedSampling: { temperature: 0, topP: 1 } });
  const onAbort = (): void => s.close();
  o.signal.addEventListener('abort', onAbort, { once: true });
  try {
    const env = {
      baseURL: o.gateway.baseURL,
      apiKey: s.apiKey,
      model: o.gateway.model,
      signal: o.signal,
    };
    return checkAgentResult(o.file, await o.agent(sample, env)).reward;
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  } finally {
    o.signal.removeEventListener('abort', onAbort);
    s.close();
  }
}

/** Accepts a finite number or `{ reward, extraInfo? }`; anything else is a contract error. */
export function checkAgentResult(
  file: string,
  r: unknown,
): { reward: number; extraInfo?: Record<string, number | string | boolean> } {
  if (typeof r === 'number') {
    if (!Number.isFinite(r))
      throw new AgentContractError(file, `agent() returned ${r}, expected a finite number`);
    return { reward: r };
  }
  if (r === null || typeof r !== 'object') {
    throw new AgentContractError(
      file,
      `agent() returned ${r === null ? 'null' : typeof r}, expected a reward number or { reward, extraInfo }`,
    );
  }
  const x = r as Record<string, unknown>;
  if (typeof x['reward'] !== 'number' || !Number.isFinite(x['reward'])) {
    throw new AgentContractError(
      file,
      `agent() returned reward=${String(x['reward'])}, expected a finite number`,
    );
  }
  const info = x['extraInfo'];
  if (info !== undefined && (info === null || typeof info !== 'object' || Array.isArray(info))) {
    throw new AgentContractError(
      file,
      'agent() returned extraInfo that is not an object of scalars',
    );
  }
  return {
    reward: x['reward'],
    ...(info ? { extraInfo: info as Record<string, number | string | boolean> } : {}),
  };
}
