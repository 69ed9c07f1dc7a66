/**
 * Errors of the agent layer. Each names the agent file, so a message read in a job log is enough
 * to find the problem. Checked by `code`, since they cross process boundaries (the `file` field
 * travels with them).
 *
 * @module
 */
import { RtjobError } from '../runtime/errors.ts';

/** Stable codes of agent errors. */
export type AgentErrorCode =
  | 'AGENT_LOAD_FAILED'
  | 'AGENT_CONTRACT'
  | 'AGENT_EPISODE_FAILED'
  | 'AGENT_EPISODE_TIMEOUT'
  | 'AGENT_ERROR_BUDGET'
  | 'AGENT_NO_MODEL_CALL';

/** Base class: `code` plus the agent file. */
export class AgentError extends RtjobError<AgentErrorCode> {
  override get name(): string {
    return 'AgentError';
  }

  readonly file: string;
  constructor(code: AgentErrorCode, file: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.file = file;
  }
}

/** The file could not be imported, or exports neither `step` nor a workflow. */
export class AgentLoadError extends AgentError {
  override get name(): string {
    return 'AgentLoadError';
  }

  constructor(file: string, problem: string, options?: { cause?: unknown }) {
    super('AGENT_LOAD_FAILED', file, `agent ${file}: ${problem}`, options);
  }
}

/** The agent returned a value of the wrong shape: a bug in the agent, fatal at once. */
export class AgentContractError extends AgentError {
  override get name(): string {
    return 'AgentContractError';
  }

  constructor(file: string, problem: string) {
    super('AGENT_CONTRACT', file, `agent ${file}: ${problem}`);
  }
}

/** One episode threw; counted against the error budget. */
export class EpisodeError extends AgentError {
  override get name(): string {
    return 'EpisodeError';
  }

  readonly promptIndex: number;
  constructor(file: string, promptIndex: number, cause: unknown) {
    const why = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
    super(
      'AGENT_EPISODE_FAILED',
      file,
      `agent ${file}: episode of prompt ${promptIndex} threw ${why}`,
      {
        cause,
      },
    );
    this.promptIndex = promptIndex;
  }
}

/** One episode ran past `--episode-timeout`. */
export class EpisodeTimeoutError extends AgentError {
  override get name(): string {
    return 'EpisodeTimeoutError';
  }

  constructor(file: string, promptIndex: number, timeoutMs: number) {
    super(
      'AGENT_EPISODE_TIMEOUT',
      file,
      `agent ${file}: episode of prompt ${promptIndex} ran past --episode-timeout (${timeoutMs} ms)`,
    );
  }
}

/** More episodes failed than the error budget allows. */
export class ErrorBudgetExceededError extends AgentError {
  override get name(): string {
    return 'ErrorBudgetExceededError';
  }

  constructor(file: string, failed: number, total: number, last: string, groupsDropped?: number) {
    const dropped = groupsDropped
      ? ` (${groupsDropped} group${groupsDropped === 1 ? '' : 's'} dropped with them)`
      : '';
    super(
      'AGENT_ERROR_BUDGET',
      file,
      `agent ${file}: ${failed} of ${total} episodes failed${dropped}, past the error budget; last: ${last}`,
    );
  }
}

/**
 * A gateway agent finished its episode without calling the model once, or failed before its first
 * call for want of the episode's client settings (`env.baseURL`, `env.apiKey`, `env.model`); the
 * episode fails.
 */
export class AgentNoModelCallError extends AgentError {
  override get name(): string {
    return 'AgentNoModelCallError';
  }

  constructor(file: string, message: string, options?: { cause?: unknown }) {
    super('AGENT_NO_MODEL_CALL', file, message, options);
  }
}
