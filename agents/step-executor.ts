/**
 * Runs one episode of an OpenRLHF-style step function, token in, token out: generate an action,
 * hand its text to `step`, append the feedback as tokens (masked out of the loss), repeat until
 * `done`, the turn cap or the context budget. The summed reward goes on the trajectory, which
 * experience making places on the last action token.
 *
 * @module
 */
import type { GenerationConfig, InferenceEngine, StopReason } from '../engines/types.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';
import { AgentContractError } from './errors.ts';
import type { AgentTokenizer, Sample, StepContext, StepFunction, StepResult } from './types.ts';

/** Settings of one step-function episode. */
export interface StepEpisodeOptions {
  file: string;
  step: StepFunction;
  maxTurns: number;
  tokenizer: AgentTokenizer;
  gconfig: GenerationConfig;
  /** Budget for prompt + actions + feedback, in tokens. */
  maxLength: number;
  /** Request id (sticky routing); one per episode. */
  rid: string;
}

/** Runs one episode of `sample` and returns its trajectory. */
export async function runStepEpisode(
  engine: Pick<InferenceEngine, 'generate'>,
  sample: Sample,
  o: StepEpisodeOptions,
): Promise<Trajectory> {
  const ids = [...sample.promptIds];
  const lossMask: number[] = new Array(ids.length).fill(0);
  const logprobs: number[] = new Array(ids.length).fill(0);
  const versions: number[] = new Array(ids.length).fill(-1);
  let observation = sample.prompt;
  let reward = 0;
  let truncated = false;
  let lastActionEnd = ids.length;
  let info: Record<string, number | string | boolean> | undefined;
  let gconfig = o.gconfig;
  const state: Record<string, unknown> = {};
  const maxNew = gconfig.maxNewTokens ?? 256;

  for (let turn = 0; turn < o.maxTurns; turn++) {
    const room = Math.min(maxNew, o.maxLength - ids.length);
    if (room <= 0) {
      truncated = true;
      break;
    }
    const out = await engine.generate({
      rid: o.rid,
      inputIds: ids,
      gconfig: { ...gconfig, maxNewTokens: room, n: 1 },
    });
    ids.push(...out.outputTokens);
    for (let i = 0; i < out.outputTokens.length; i++) {
      lossMask.push(1);
      logprobs.push(out.outputLogprobs[i] ?? 0);
      versions.push(out.outputVersions[i] ?? -1);
    }
    lastActionEnd = ids.length;
    const stopReason: StopReason = out.stopReason;
    truncated = stopReason === 'length';
    const action = o.tokenizer.decode(out.outputTokens);
    const ctx: StepContext = {
      turn,
      tokenizer: o.tokenizer,
      state,
      sample,
      stopReason,
      actionIds: out.outputTokens,
    };
    const result = checkStepResult(o.file, await o.step(observation, action, sample.label, ctx));
    reward += result.reward;
    if (result.extraInfo) info = result.extraInfo;
    if (result.gconfig) gconfig = { ...gconfig, ...result.gconfig };
    if (result.done) break;
    const feedback = feedbackOf(o.file, observation + action, result);
    const feedbackIds = result.environmentFeedbackIds ?? o.tokenizer.encode(feedback);
    observation = observation + action + feedback;
    for (const t of feedbackIds) {
      ids.push(t);
      lossMask.push(0);
      logprobs.push(0);
      versions.push(-1);
    }
    if (turn === o.maxTurns - 1) truncated = true;
  }
  // Feedback after the last action is never trained on; dropping it keeps batches short.
  ids.length = lossMask.length = logprobs.length = versions.length = lastActionEnd;
  return {
    inputIds: ids,
    lossMask,
    logprobs,
    versions,
    reward,
    groupId: sample.groupId,
    promptIndex: sample.index,
    truncated,
    ...(info ? { info } : {}),
  };
}

/** Rejects a return value of the wrong shape with a message that says what was expected. */
export function checkStepResult(file: string, r: unknown): StepResult {
  if (r === null || typeof r !== 'object') {
    throw new AgentContractError(
      file,
      `step() returned ${r === null ? 'null' : typeof r}, expected { reward, done, environmentFeedback? }`,
    );
  }
  const x = r as Record<string, unknown>;
  if (typeof x['reward'] !== 'number' || !Number.isFinite(x['reward'])) {
    throw new AgentContractError(
      file,
      `step() returned reward=${String(x['reward'])}, expected a finite number`,
    );
  }
  if (typeof x['done'] !== 'boolean') {
    throw new AgentContractError(
      file,
      `step() returned done=${String(x['done'])}, expected a boolean`,
    );
  }
  for (const k of ['environmentFeedback', 'nextObservation'] as const) {
    if (x[k] !== undefined && typeof x[k] !== 'string') {
      throw new AgentContractError(
        file,
        `step() returned ${k} of type ${typeof x[k]}, expected a string`,
      );
    }
  }
  const fids = x['environmentFeedbackIds'];
  if (
    fids !== undefined &&
    !(Array.isArray(fids) && fids.every((t) => Number.isInteger(t) && t >= 0))
  ) {
    throw new AgentContractError(
      file,
      'step() returned environmentFeedbackIds that are not token ids',
    );
  }
  return x as unknown as StepResult;
}

function feedbackOf(file: string, transcript: string, r: StepResult): string {
  if (r.environmentFeedback !== undefined) return r.environmentFeedback;
  if (r.nextObservation !== undefined) {
    if (!r.nextObservation.startsWith(transcript)) {
      throw new AgentContractError(
        file,
        'step() returned a nextObservation that does not extend observation + action; ' +
          'tokens already generated cannot be rewritten (return environmentFeedback instead)',
      );
    }
    return r.nextObservation.slice(transcript.length);
  }
  if (r.environmentFeedbackIds !== undefined) return '';
  throw new AgentContractError(
    file,
    'step() returned done=false without environmentFeedback or nextObservation',
  );
}
