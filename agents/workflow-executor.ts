/**
 * Runs one AReaL-style workflow episode and checks what it returns, so a malformed trajectory is
 * reported against the agent file rather than surfacing later as a shape error in the trainer.
 *
 * @module
 */
import type { InferenceEngine } from '../engines/types.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';
import { AgentContractError } from './errors.ts';
import type { Sample, Workflow, WorkflowEngine } from './types.ts';

/** Runs `workflow` on `sample`; null when the workflow rejects the prompt. */
export async function runWorkflowEpisode(
  engine: Pick<InferenceEngine, 'generate' | 'getVersion'>,
  sample: Sample,
  file: string,
  workflow: Workflow,
): Promise<Trajectory[] | null> {
  const view: WorkflowEngine = {
    generate: (req) => {
      if ((req.gconfig?.n ?? 1) !== 1) {
        throw new AgentContractError(
          file,
          'engine.generate takes one sample (gconfig.n = 1); call it n times',
        );
      }
      return engine.generate(req);
    },
    getVersion: () => engine.getVersion(),
  };
  const out = await workflow.runEpisode(view, sample);
  if (out === null || out === undefined) return null;
  const list = Array.isArray(out) ? out : [out];
  if (list.length === 0) return null;
  return list.map((t, i) => checkTrajectory(file, t, i, sample));
}

/** Validates one returned trajectory and stamps the prompt's group id and index on it. */
export function checkTrajectory(file: string, t: unknown, i: number, sample: Sample): Trajectory {
  const where = `runEpisode() trajectory ${i}`;
  if (t === null || typeof t !== 'object') {
    throw new AgentContractError(
      file,
      `${where} is ${t === null ? 'null' : typeof t}, expected an object`,
    );
  }
  const x = t as Record<string, unknown>;
  for (const k of ['inputIds', 'lossMask', 'logprobs', 'versions'] as const) {
    if (!Array.isArray(x[k])) {
      throw new AgentContractError(file, `${where} has no ${k} array`);
    }
  }
  const n = (x['inputIds'] as unknown[]).length;
  for (const k of ['lossMask', 'logprobs', 'versions'] as const) {
    const len = (x[k] as unknown[]).length;
    if (len !== n) {
      throw new AgentContractError(file, `${where}: ${k} has ${len} entries, inputIds has ${n}`);
    }
  }
  const mask = x['lossMask'] as unknown[];
  if (!mask.every((m) => m === 0 || m === 1)) {
    throw new AgentContractError(file, `${where}: lossMask must hold only 0 and 1`);
  }
  if (!mask.some((m) => m === 1)) {
    throw new AgentContractError(file, `${where}: lossMask has no generated token`);
  }
  if (typeof x['reward'] !== 'number' || !Number.isFinite(x['reward'])) {
    throw new AgentContractError(
      file,
      `${where}: reward=${String(x['reward'])}, expected a finite number`,
    );
  }
  return {
    ...(x as unknown as Trajectory),
    truncated: x['truncated'] === true,
    groupId: sample.groupId,
    promptIndex: sample.index,
  };
}
