/**
 * Exact tokens across turns. A session (one agent episode) keeps the token history of every
 * completion it made: prompt ids, generated ids with their behaviour logprobs and policy versions.
 * When a request's rendered prompt extends a recorded trajectory token for token, the new turn is
 * appended to it (the tokens between, tool results and template glue, masked out of the loss), so
 * a 5-turn tool conversation trains as one sequence with the model's own tokens, never
 * re-tokenized. When none is extended (the template drops earlier reasoning, or renders the
 * model's output differently from how it was generated), bridge mode (`bridge.ts`) appends the
 * turn anyway where that is provably safe, with the prompt the engine is given built from the
 * recorded ids; otherwise (the agent edited its history, ...) a new trajectory starts with the
 * whole prompt masked, and the break and its reason are counted. Every trajectory of the episode
 * shares its reward.
 *
 * @module
 */
import type { GenerateResult } from '../engines/types.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';
import type { RecordedTurn } from './bridge.ts';

/** Where a request's prompt stopped matching the closest recorded trajectory (debug switch). */
export interface Drift {
  /** Completion number (0-based) of the request that diverged. */
  completion: number;
  /** Token position of the first difference. */
  at: number;
  /** `generated`: the template re-renders the model's own output differently; `prompt`: earlier prompt or environment text changed. */
  kind: 'generated' | 'prompt';
  /** Recorded text around the difference. */
  recorded: string;
  /** Re-rendered text around the difference. */
  rendered: string;
}

interface Segment {
  ids: number[];
  lossMask: number[];
  logprobs: number[];
  versions: number[];
  truncated: boolean;
  /** A request extending this segment is generating; a parallel one must not extend it too. */
  claimed: boolean;
  /** Sequence number of the last completion appended (orders trajectories for discounting). */
  lastCompletion: number;
  /** The last turn appended, for bridging the next one. */
  turn: RecordedTurn | undefined;
  /** The rendered prompt of the last completion appended, and where that completion starts. */
  last: { rendered: number[]; at: number } | undefined;
}

/** A request's hold on the trajectory it extends (or none: it starts a new one). */
export interface Claim {
  segment: Segment | undefined;
  /** The prompt to generate from: the rendered one, or the bridged one. */
  promptIds: number[];
  /** The prompt as rendered (a retry of this request renders the same). */
  rendered: number[];
  /** The client went away, or retried: the outputs are kept as aborted, not appended. */
  aborted: boolean;
}

/** A completion no client saw: kept with its tokens and versions, never trained on. */
export interface AbortedCompletion {
  promptIds: number[];
  outputTokens: number[];
  logprobs: number[];
  versions: number[];
}

/** Builds a bridged prompt from a trajectory's ids and last turn, or says why it cannot. */
export type Bridge = (
  ids: readonly number[],
  turn: RecordedTurn,
) => number[] | { reason: string } | undefined;

/** A request that extended no trajectory of its episode although one was there to extend. */
export interface TrajectoryBreak {
  /** Completion number (0-based) of the request. */
  completion: number;
  reason: string;
}

/** Counters of one session. */
export interface SessionStats {
  completions: number;
  /** Turns appended to an existing trajectory. */
  appended: number;
  /** Of those, appended by bridging (`bridge.ts`). */
  bridged: number;
  trajectories: number;
  /** Completions whose client went away or retried: recorded apart, not trained on. */
  aborted: number;
  /** Requests that started a new trajectory where one was there to continue. */
  breaks: TrajectoryBreak[];
  drift: Drift[];
}

/** The token history of one agent episode. */
export class TokenSession {
  private readonly segments: Segment[] = [];
  private completions = 0;
  private appended = 0;
  private bridged = 0;
  private readonly breaks: TrajectoryBreak[] = [];
  private readonly abortedCompletions: AbortedCompletion[] = [];
  private readonly inFlight = new Set<Claim>();
  private readonly drift: Drift[] = [];
  private readonly traces = new Set<string>();
  private closed = false;

  /** @param decode renders ids as text for drift reports (special tokens kept). */
  constructor(private readonly decode?: (ids: number[]) => string) {}

  /**
   * Finds the longest unclaimed trajectory that `promptIds` extends and claims it until
   * {@link record} (or {@link release}). When none is, `bridge` is tried on the unclaimed ones,
   * latest first, and the first it bridges is claimed with the bridged prompt; when none can be,
   * the break is kept in {@link stats} with the reason. With the debug switch on, a prompt that
   * extends none is compared with the closest one and the difference kept too.
   */
  begin(promptIds: number[], bridge?: Bridge, o: { retry?: boolean } = {}): Claim {
    const claim = this.find(promptIds, bridge, o.retry ?? false);
    this.inFlight.add(claim);
    return claim;
  }

  private find(promptIds: number[], bridge: Bridge | undefined, retry: boolean): Claim {
    const fresh = { rendered: promptIds, aborted: false };
    // A retry supersedes its earlier attempts: one still generating is aborted, and one already
    // appended (its answer lost on the way) is taken back out, so the retry continues from the
    // same point and no completion dangles in the trajectory.
    if (retry) {
      for (const c of this.inFlight) if (sameIds(c.rendered, promptIds)) this.abort(c);
      for (const s of this.segments) {
        if (s.claimed || !s.last || !sameIds(s.last.rendered, promptIds)) continue;
        this.takeBack(s);
        s.claimed = true;
        return { segment: s, promptIds: [...s.ids], ...fresh };
      }
    }
    let best: Segment | undefined;
    for (const s of this.segments) {
      if (s.claimed || s.ids.length > promptIds.length) continue;
      if ((best === undefined || s.ids.length > best.ids.length) && isPrefix(s.ids, promptIds))
        best = s;
    }
    if (best) {
      best.claimed = true;
      return { segment: best, promptIds, ...fresh };
    }
    if (this.decode && this.segments.length > 0) this.noteDrift(promptIds);
    const open = this.segments
      .filter((s) => !s.claimed && s.turn)
      .sort((a, b) => b.lastCompletion - a.lastCompletion);
    let reason: string | undefined;
    for (const s of open) {
      const r = bridge?.(s.ids, s.turn!);
      if (r === undefined) continue;
      if (Array.isArray(r)) {
        s.claimed = true;
        this.bridged++;
        return { segment: s, promptIds: r, ...fresh };
      }
      reason ??= r.reason;
    }
    if (reason !== undefined) this.breaks.push({ completion: this.completions, reason });
    return { segment: undefined, promptIds, ...fresh };
  }

  /** Gives up a claim without recording (the request failed). */
  release(claim: Claim): void {
    this.inFlight.delete(claim);
    if (claim.segment && !claim.aborted) claim.segment.claimed = false;
  }

  /**
   * The client of `claim` went away (or retried): its trajectory is free for the next request at
   * once, and its outputs, when they come, are kept as aborted.
   */
  abort(claim: Claim): void {
    if (claim.aborted || !this.inFlight.has(claim)) return;
    if (claim.segment) claim.segment.claimed = false;
    claim.aborted = true;
  }

  /** Moves the last completion appended to `s` to the aborted ones (its retry replaces it). */
  private takeBack(s: Segment): void {
    const { at } = s.last!;
    this.abortedCompletions.push({
      promptIds: s.ids.slice(0, at),
      outputTokens: s.ids.slice(at),
      logprobs: s.logprobs.slice(at),
      versions: s.versions.slice(at),
    });
    for (const a of [s.ids, s.lossMask, s.logprobs, s.versions]) a.length = at;
    // The prompt stays: the retry renders it again and extends it.
    s.last = undefined;
    s.turn = undefined;
    s.truncated = false;
  }

  /**
   * Records the outputs of a claimed request: the first extends the claimed trajectory, the others
   * (n > 1) and any unclaimed request start new trajectories from the prompt. `turn` is what the
   * first output answered, kept for bridging the next turn.
   */
  record(claim: Claim, outputs: GenerateResult[], turn?: RecordedTurn): void {
    this.inFlight.delete(claim);
    // A request that outlived its episode (timeout) must not change what was already handed on.
    if (this.closed) return;
    if (claim.aborted) {
      for (const out of outputs) {
        this.abortedCompletions.push({
          promptIds: claim.promptIds,
          outputTokens: out.outputTokens,
          logprobs: out.outputLogprobs,
          versions: out.outputVersions,
        });
      }
      return;
    }
    outputs.forEach((out, i) => {
      const seq = this.completions++;
      let s = i === 0 ? claim.segment : undefined;
      if (s) {
        this.appended++;
        pushMasked(s, claim.promptIds.slice(s.ids.length));
      } else {
        s = {
          ids: [],
          lossMask: [],
          logprobs: [],
          versions: [],
          truncated: false,
          claimed: false,
          lastCompletion: seq,
          turn: undefined,
          last: undefined,
        };
        pushMasked(s, claim.promptIds);
        this.segments.push(s);
      }
      s.last = i === 0 ? { rendered: claim.rendered, at: s.ids.length } : undefined;
      s.ids.push(...out.outputTokens);
      for (let k = 0; k < out.outputTokens.length; k++) {
        s.lossMask.push(1);
        s.logprobs.push(out.outputLogprobs[k] ?? 0);
        s.versions.push(out.outputVersions[k] ?? -1);
      }
      s.truncated = out.stopReason === 'length';
      s.lastCompletion = seq;
      s.turn = i === 0 ? turn : undefined;
    });
    this.release(claim);
  }

  /** Ends recording: later completions of this session are dropped. */
  close(): void {
    this.closed = true;
  }

  /** Counters so far. */
  get stats(): SessionStats {
    return {
      completions: this.completions,
      appended: this.appended,
      bridged: this.bridged,
      trajectories: this.segments.filter((s) => s.lossMask.includes(1)).length,
      aborted: this.abortedCompletions.length,
      breaks: [...this.breaks],
      drift: [...this.drift],
    };
  }

  /** W3C trace ids the episode's requests carried (`traceparent`), in first-seen order. */
  get traceIds(): string[] {
    return [...this.traces];
  }

  /** Notes the trace a request of this episode belongs to (its `traceparent`). */
  noteTrace(traceId: string): void {
    this.traces.add(traceId);
  }

  /** The completions no client saw (aborted, or replaced by a retry), kept apart. */
  get aborted(): readonly AbortedCompletion[] {
    return this.abortedCompletions;
  }

  /**
   * The episode's trajectories, each with the episode `reward`; with `discount` < 1 a trajectory
   * whose last completion came k completions before the episode's last gets `reward · discount^k`.
   */
  trajectories(
    reward: number,
    meta: {
      groupId: string;
      promptIndex: number;
      info?: Record<string, number | string | boolean>;
    },
    discount = 1,
  ): Trajectory[] {
    const last = this.completions - 1;
    return this.segments
      .filter((s) => s.lossMask.includes(1))
      .map((s) => ({
        inputIds: [...s.ids],
        lossMask: [...s.lossMask],
        logprobs: [...s.logprobs],
        versions: [...s.versions],
        reward: discount === 1 ? reward : reward * discount ** (last - s.lastCompletion),
        groupId: meta.groupId,
        promptIndex: meta.promptIndex,
        truncated: s.truncated,
        ...(meta.info ? { info: meta.info } : {}),
      }));
  }

  private noteDrift(promptIds: number[]): void {
    let closest: Segment | undefined;
    let at = -1;
    for (const s of this.segments) {
      const n = commonPrefix(s.ids, promptIds);
      if (n > at) [closest, at] = [s, n];
    }
    if (!closest || !this.decode) return;
    const from = Math.max(0, at - 8);
    this.drift.push({
      completion: this.completions,
      at,
      kind: closest.lossMask[at] === 1 ? 'generated' : 'prompt',
      recorded: this.decode(closest.ids.slice(from, at + 16)),
      rendered: this.decode(promptIds.slice(from, at + 16)),
    });
  }
}

function pushMasked(s: Segment, ids: number[]): void {
  for (const t of ids) {
    s.ids.push(t);
    s.lossMask.push(0);
    s.logprobs.push(0);
    s.versions.push(-1);
  }
}

function sameIds(a: number[], b: number[]): boolean {
  return a.length === b.length && isPrefix(a, b);
}

function isPrefix(a: number[], b: number[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function commonPrefix(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
