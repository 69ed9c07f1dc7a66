/**
 * The agent APIs (`rtjob/agent`): the types a `--agent-func FILE.ts` is written against, one set
 * per API. Types only: an agent file needs no rtjob code at run time.
 *
 * @example
 * import type { Sample, StepContext, StepResult } from 'rtjob/agent';
 * export async function step(obs: string, action: string, label: string | undefined, ctx: StepContext): Promise<StepResult> {
 *   return { reward: action.includes(label ?? '') ? 1 : 0, done: true };
 * }
 *
 * @module
 */
// 1. Step function (OpenRLHF): `export async function step(observation, action, label, ctx)`.
export type { StepContext, StepFunction, StepResult } from './types.ts';
// 2. Workflow (AReaL): `export class Workflow { constructor(init); runEpisode(engine, sample) }`.
export type { Workflow, WorkflowEngine, WorkflowInit } from './types.ts';
export type { Trajectory } from '../algorithms/trajectory.ts';
export type {
  GenerateRequest,
  GenerateResult,
  GenerationConfig,
  StopReason,
} from '../engines/types.ts';
// 3. Black-box agent: `export async function agent(sample, { baseURL, apiKey, model, signal })`.
export type { AgentEnv, AgentFunction, AgentResult } from './types.ts';
// Shared by all three.
export type { AgentTokenizer, ChatMessage, Sample } from './types.ts';
