/**
 * The agent APIs as one table: a step function (`step`), a workflow class (`Workflow`) and a
 * black-box agent (`agent(sample, env)` over an OpenAI-compatible gateway). Each entry says how
 * its agent module is recognised (for the loader's messages), whether its episodes need a
 * gateway in the rollout's worker, and how one prompt's group runs. The episode runner and the
 * rollout read it instead of branching on the kind; a new agent API is its executor plus one
 * entry (`agents/README.md`, "Adding an agent API").
 *
 * @module
 */
import type { Trajectory } from '../algorithms/trajectory.ts';
import type { GenerationConfig, InferenceEngine } from '../engines/types.ts';
import type { Gateway } from '../gateway/server.ts';
import { runGatewayEpisode } from './agent-executor.ts';
import { runStepEpisode } from './step-executor.ts';
import type { Agent, AgentTokenizer, Sample } from './types.ts';
import { runWorkflowEpisode } from './workflow-executor.ts';

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

/** What the episode runner gives a kind to run one group with. */
export interface GroupRun {
  engine: InferenceEngine;
  sample: Sample;
  tokenizer: AgentTokenizer;
  gconfig: GenerationConfig;
  maxLength: number;
  gateway: Gateway | undefined;
  turnDiscount: number;
  /** One episode under a slot and the timeout; its failure comes back as a value. */
  episode<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T | Error>;
  /** A request id unique in this runner. */
  rid(): string;
}

/** One agent API. */
export interface AgentKindSpec<A extends Agent> {
  /** How its module says which API it is, as the loader's error lists it. */
  marker: string;
  /** Its episodes reach the engine through an OpenAI-compatible gateway in the worker. */
  needsGateway: boolean;
  runGroup(agent: A, run: GroupRun): Promise<GroupResult>;
}

type Kinds = { [K in Agent['kind']]: AgentKindSpec<Extract<Agent, { kind: K }>> };

/** `n` episodes of the group, all or nothing: one failed episode fails the group. */
async function nEpisodes(
  run: GroupRun,
  one: (signal: AbortSignal) => Promise<Trajectory | Trajectory[]>,
): Promise<GroupResult> {
  const base = { index: run.sample.index, groupId: run.sample.groupId };
  const runs = await Promise.all(
    Array.from({ length: run.sample.nSamples }, () => run.episode(one)),
  );
  const errors = runs.filter((r): r is Error => r instanceof Error).map((e) => e.message);
  if (errors.length > 0)
    return { ...base, status: 'failed', trajectories: [], errors, episodes: runs.length };
  const trajectories = (runs as (Trajectory | Trajectory[])[]).flat();
  return { ...base, status: 'ok', trajectories, errors: [], episodes: runs.length };
}

/** Every agent API, by the `kind` its loaded agent carries. */
export const agentKinds: Kinds = {
  step: {
    marker: '`step` (a function)',
    needsGateway: false,
    runGroup: (agent, run) =>
      nEpisodes(run, () =>
        runStepEpisode(run.engine, run.sample, {
          file: agent.file,
          step: agent.step,
          maxTurns: agent.maxTurns,
          tokenizer: run.tokenizer,
          gconfig: run.gconfig,
          maxLength: run.maxLength,
          rid: `${run.sample.groupId}-${run.rid()}`,
        }),
      ),
  },
  workflow: {
    marker: '`Workflow` (a class with runEpisode)',
    needsGateway: false,
    // One call returns the whole group (or null: the workflow rejects the prompt).
    async runGroup(agent, run) {
      const base = { index: run.sample.index, groupId: run.sample.groupId, episodes: 1 };
      const r = await run.episode(() =>
        runWorkflowEpisode(run.engine, run.sample, agent.file, agent.workflow),
      );
      if (r instanceof Error)
        return { ...base, status: 'failed', trajectories: [], errors: [r.message] };
      if (r === null) return { ...base, status: 'rejected', trajectories: [], errors: [] };
      return { ...base, status: 'ok', trajectories: r, errors: [] };
    },
  },
  agent: {
    marker: '`agent` (a function)',
    needsGateway: true,
    runGroup: (agent, run) =>
      nEpisodes(run, (signal) =>
        runGatewayEpisode(run.sample, {
          file: agent.file,
          agent: agent.agent,
          gateway: run.gateway!,
          signal,
          turnDiscount: run.turnDiscount,
        }),
      ),
  },
};

/** The entry of a loaded agent's API. */
export function agentKind<A extends Agent>(agent: A): AgentKindSpec<A> {
  return agentKinds[agent.kind] as unknown as AgentKindSpec<A>;
}

/** The agent APIs as the loader lists them: `` `step` (a function), … or `agent` (a function) ``. */
export function agentMarkers(): string {
  const ms = Object.values(agentKinds).map((k) => k.marker);
  return `${ms.slice(0, -1).join(', ')} or ${ms[ms.length - 1]}`;
}
