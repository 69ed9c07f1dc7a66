/**
 * Loads an agent file (`--agent-func FILE.ts`) inside a rollout worker and tells which API it
 * implements. Problems are reported as `AgentLoadError`s that name the file and what is wrong.
 *
 * @module
 */
import { existsSync, statSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { AgentLoadError } from './errors.ts';
import { agentMarkers } from './kinds.ts';
import type { Agent, AgentFunction, StepFunction, Workflow, WorkflowInit } from './types.ts';

/** Turn cap for step functions that never say `done`; the context budget usually ends them first. */
export const defaultMaxTurns = 64;

/**
 * Imports `file` and returns the agent it exports:
 * - `export async function step(observation, action, label, ctx)` (and optionally `maxTurns`), or
 * - `export class Workflow { runEpisode(engine, sample) }` (also as the default export), built with
 *   `new Workflow(init)`, or `export const workflow = { runEpisode }`, or
 * - `export async function agent(sample, { baseURL, apiKey, model, signal })`, a black-box agent
 *   that talks to the rollout's OpenAI-compatible gateway.
 *
 * @example
 * const agent = await loadAgent('./examples/agent.ts', init);
 */
export async function loadAgent(file: string, init: WorkflowInit): Promise<Agent> {
  const path = isAbsolute(file) ? file : resolve(process.cwd(), file);
  if (existsSync(path) && statSync(path).isDirectory()) {
    throw new AgentLoadError(
      file,
      'is a directory: give the agent module itself, e.g. DIR/agent.ts',
    );
  }
  if (!existsSync(path) || !statSync(path).isFile()) {
    throw new AgentLoadError(file, 'no such file');
  }
  if (!/\.(ts|mts|js|mjs)$/.test(path)) {
    throw new AgentLoadError(file, 'expected a .ts or .js module');
  }
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  } catch (err) {
    const why = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    throw new AgentLoadError(file, `failed to import: ${why}`, { cause: err });
  }
  const step = mod['step'];
  const agent = mod['agent'];
  const workflow = pickWorkflow(file, mod, init);
  const found = [
    step !== undefined && '`step`',
    workflow !== undefined && 'a workflow',
    agent !== undefined && '`agent`',
  ].filter(Boolean);
  if (found.length > 1) {
    throw new AgentLoadError(file, `exports ${found.join(' and ')}; export one of them`);
  }
  if (agent !== undefined) {
    if (typeof agent !== 'function') {
      throw new AgentLoadError(
        file,
        `\`agent\` is a ${typeof agent}, expected a function (sample, env)`,
      );
    }
    return { kind: 'agent', file, agent: agent as AgentFunction };
  }
  if (step !== undefined) {
    if (typeof step !== 'function') {
      throw new AgentLoadError(file, `\`step\` is a ${typeof step}, expected a function`);
    }
    const maxTurns = mod['maxTurns'] ?? defaultMaxTurns;
    if (typeof maxTurns !== 'number' || !Number.isInteger(maxTurns) || maxTurns < 1) {
      throw new AgentLoadError(
        file,
        `\`maxTurns\` must be an integer >= 1, got ${String(maxTurns)}`,
      );
    }
    return { kind: 'step', file, step: step as StepFunction, maxTurns };
  }
  if (workflow !== undefined) return { kind: 'workflow', file, workflow };
  const names = Object.keys(mod).join(', ') || 'nothing';
  throw new AgentLoadError(file, `exports none of ${agentMarkers()}; it exports ${names}`);
}

function pickWorkflow(
  file: string,
  mod: Record<string, unknown>,
  init: WorkflowInit,
): Workflow | undefined {
  const instance = mod['workflow'];
  if (instance !== undefined) {
    if (typeof (instance as Workflow | null)?.runEpisode !== 'function') {
      throw new AgentLoadError(file, '`workflow` has no runEpisode(engine, sample) method');
    }
    return instance as Workflow;
  }
  const def = mod['default'];
  // A default-exported function that is no class (async or arrow functions have no prototype).
  if (mod['Workflow'] === undefined && typeof def === 'function' && def.prototype === undefined) {
    throw new AgentLoadError(
      file,
      'has a default export, which is not how rtjob finds an agent: name it, `export async function agent(sample, env)` (black box), `export async function step(...)`, or `export class Workflow`',
    );
  }
  const cls = mod['Workflow'] ?? (typeof def === 'function' ? def : undefined);
  if (cls === undefined) return undefined;
  if (typeof cls !== 'function') {
    throw new AgentLoadError(file, `\`Workflow\` is a ${typeof cls}, expected a class`);
  }
  let built: unknown;
  try {
    built = new (cls as new (init: WorkflowInit) => unknown)(init);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new AgentLoadError(file, `new Workflow(init) threw: ${why}`, { cause: err });
  }
  if (typeof (built as Workflow | null)?.runEpisode !== 'function') {
    throw new AgentLoadError(file, 'the Workflow class has no runEpisode(engine, sample) method');
  }
  return built as Workflow;
}
