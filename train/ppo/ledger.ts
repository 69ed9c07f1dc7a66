/**
 * The episode ledger of a `train_ppo` run: every episode handed to an engine is `sampling`, then
 * `sampled` (by which engine, on which weight versions), and ends `trained` (in which step) or
 * `dropped` with a {@link DropReason}. Nothing here calls anything: the loops tell the ledger
 * what happened (`ledger-run.ts`), and the ledger answers whether the books balance:
 * `sampled N = trained T + dropped D + in flight F`, every trained prompt trained exactly
 * `n_samples` times, no episode trained twice.
 *
 * A checkpoint carries the ledger's {@link LedgerCounts} as they stood at its step (episodes then
 * in flight count as dropped `stopped`: a run resumed from it samples their prompts again), so a
 * resumed run's ledger goes on from the checkpoint.
 *
 * @module
 */

/** Why an episode was not trained. */
export type DropReason =
  | 'filtered'
  | 'stale'
  | 'agent error'
  | 'engine death'
  | 'stopped'
  | 'rolled back';

/** Where an episode stands: `trained` and `dropped` are final, the rest are in flight. */
export type EpisodeStatus = 'sampling' | 'sampled' | 'trained' | 'dropped';

/** One episode of the ledger, as `rtjob ledger JOB --json` lists it. */
export interface LedgerEntry {
  /** `<group id>.<attempt>.<k>`: a group run again (its engine died) gets a new attempt. */
  id: string;
  status: EpisodeStatus;
  /** The step that trained it (trained), or in which it was dropped. */
  step?: number;
  reason?: DropReason;
  /** The group (one prompt of one epoch) it belongs to. */
  key: string;
  /** The prompt's index in the dataset. */
  prompt: number;
  /** `rollout-<i>` and its restart count. */
  engine: string;
  versionMin?: number;
  versionMax?: number;
}

/** What a checkpoint carries of the ledger. */
export interface LedgerCounts {
  sampled: number;
  trained: number;
  dropped: Partial<Record<DropReason, number>>;
  /** Trained episodes per group (prompt of an epoch). */
  trainedGroups: Record<string, number>;
  /** Runs so far (a resume adds one): episode ids of each run are distinct. */
  runs: number;
}

/** What a group's rollout reported back, as the ledger reads it. */
export interface GroupOutcome {
  status: 'ok' | 'rejected' | 'failed';
  versionMin?: number;
  versionMax?: number;
}

const final = (s: EpisodeStatus): boolean => s === 'trained' || s === 'dropped';

/** The ledger of one run (see the module comment). */
export class EpisodeLedger {
  private readonly entries = new Map<string, LedgerEntry>();
  /** The attempt of each group whose episodes count, and what its rollout reported. */
  private readonly current = new Map<string, { attempt: string; outcome?: GroupOutcome }>();
  private readonly dirty = new Set<string>();
  private readonly carried: LedgerCounts;
  private attempts = 0;
  /** Episodes told to end that had already ended (an episode trained twice lands here). */
  readonly violations: string[] = [];

  constructor(
    readonly nSamples: number,
    carried?: LedgerCounts,
  ) {
    this.carried = carried
      ? { ...carried, runs: carried.runs + 1 }
      : { sampled: 0, trained: 0, dropped: {}, trainedGroups: {}, runs: 1 };
  }

  /**
   * A group handed to `engine`: its `nSamples` episodes are `sampling`. A previous attempt of the
   * same group that was never settled lost its batch with its engine: dropped `engine death`.
   * Returns the attempt's id.
   */
  dispatch(key: string, prompt: number, engine: string): string {
    const before = this.current.get(key);
    if (before) this.end(before.attempt, 'dropped', { reason: 'engine death' });
    const attempt = `${key}.r${this.carried.runs}a${++this.attempts}`;
    this.current.set(key, { attempt });
    for (let k = 0; k < this.nSamples; k++) {
      const id = `${attempt}.${k}`;
      this.entries.set(id, { id, status: 'sampling', key, prompt, engine });
      this.dirty.add(id);
    }
    return attempt;
  }

  /** The rollout answered for `attempt`: its episodes are `sampled` on these versions. */
  returned(attempt: string, outcome: GroupOutcome): void {
    const cur = [...this.current.values()].find((c) => c.attempt === attempt);
    if (cur) cur.outcome = outcome;
    for (const e of this.episodes(attempt)) {
      if (e.status !== 'sampling') continue;
      e.status = 'sampled';
      if (outcome.versionMin !== undefined) e.versionMin = outcome.versionMin;
      if (outcome.versionMax !== undefined) e.versionMax = outcome.versionMax;
      this.dirty.add(e.id);
    }
  }

  /** The call for `attempt` failed (its engine died): its episodes are dropped with `reason`. */
  lost(attempt: string, reason: DropReason): void {
    for (const [key, c] of this.current) if (c.attempt === attempt) this.current.delete(key);
    this.end(attempt, 'dropped', { reason });
  }

  /**
   * Step `step` is done with the groups `keys`: those in `trained` are trained, the others
   * dropped (`agent error` when an episode of theirs failed, else `filtered`).
   */
  settle(keys: readonly string[], trained: ReadonlySet<string>, step: number): void {
    for (const key of keys) {
      const c = this.current.get(key);
      if (!c) continue;
      this.current.delete(key);
      if (trained.has(key)) {
        this.end(c.attempt, 'trained', { step });
        this.carried.trainedGroups[key] = (this.carried.trainedGroups[key] ?? 0) + this.nSamples;
      } else {
        const reason = c.outcome?.status === 'failed' ? 'agent error' : 'filtered';
        this.end(c.attempt, 'dropped', { step, reason });
      }
    }
  }

  /** The run stops: every episode still in flight is dropped with `reason`. */
  stopAll(reason: DropReason = 'stopped'): void {
    for (const c of this.current.values()) this.end(c.attempt, 'dropped', { reason });
    this.current.clear();
  }

  /** Entries changed since the last call (to store them). */
  takeChanged(): LedgerEntry[] {
    const out = [...this.dirty].map((id) => ({ ...this.entries.get(id)! }));
    this.dirty.clear();
    return out;
  }

  /** The run's counts so far, the checkpoint's included; `inFlight` is what has not ended. */
  counts(): LedgerCounts & { inFlight: number } {
    const c = {
      ...this.carried,
      dropped: { ...this.carried.dropped },
      trainedGroups: { ...this.carried.trainedGroups },
      inFlight: 0,
    };
    for (const e of this.entries.values()) {
      c.sampled++;
      if (e.status === 'trained') c.trained++;
      else if (e.status === 'dropped') c.dropped[e.reason!] = (c.dropped[e.reason!] ?? 0) + 1;
      else c.inFlight++;
    }
    return c;
  }

  /** What a checkpoint written now carries: episodes in flight count as dropped `stopped`. */
  snapshot(): LedgerCounts {
    const { inFlight, ...c } = this.counts();
    if (inFlight > 0) c.dropped.stopped = (c.dropped.stopped ?? 0) + inFlight;
    return c;
  }

  /**
   * Whether the books balance, and the line that says so. Episodes in flight fail it only at the
   * end (`final`); before, the line says the books balance so far.
   */
  verdict(final = true): { ok: boolean; line: string; short: string } {
    const c = this.counts();
    const dropped = Object.values(c.dropped).reduce((a, n) => a + n, 0);
    const reasons = Object.entries(c.dropped)
      .filter(([, n]) => n > 0)
      .map(([r, n]) => `${r} ${n}`)
      .join(', ');
    const off = Object.entries(c.trainedGroups).filter(([, n]) => n !== this.nSamples);
    const balanced = c.sampled === c.trained + dropped + c.inFlight;
    const ok =
      balanced && off.length === 0 && this.violations.length === 0 && (!final || c.inFlight === 0);
    const prompts =
      off.length === 0
        ? `each trained exactly ${this.nSamples} times`
        : `${off.length} trained other than ${this.nSamples} times (${off
            .slice(0, 3)
            .map(([k, n]) => `${k}: ${n}`)
            .join(', ')})`;
    const why = [
      balanced ? '' : 'counts do not add up',
      final && c.inFlight > 0 ? `${c.inFlight} in flight` : '',
      off.length ? 'prompts off' : '',
      this.violations.length ? `${this.violations.length} ended twice` : '',
    ].filter(Boolean);
    return {
      ok,
      short: `${ok ? (final ? 'books balance' : 'balanced so far') : 'books do NOT balance'}: ${c.sampled} episodes = ${c.trained} trained + ${dropped} dropped${c.inFlight ? ` + ${c.inFlight} in flight` : ''}`,
      line:
        `episodes: sampled ${c.sampled} = trained ${c.trained} + dropped ${dropped}` +
        `${reasons ? ` (${reasons})` : ''} + in flight ${c.inFlight}; prompts: ${prompts}; ` +
        (!ok
          ? `conservation FAILED: ${why.join(', ')}`
          : final
            ? 'conservation ok'
            : 'balanced so far'),
    };
  }

  private episodes(attempt: string): LedgerEntry[] {
    const out: LedgerEntry[] = [];
    for (let k = 0; k < this.nSamples; k++) {
      const e = this.entries.get(`${attempt}.${k}`);
      if (e) out.push(e);
    }
    return out;
  }

  private end(
    attempt: string,
    status: 'trained' | 'dropped',
    at: { step?: number; reason?: DropReason },
  ): void {
    for (const e of this.episodes(attempt)) {
      if (final(e.status)) {
        if (status === 'trained' || e.status === 'trained') this.violations.push(e.id);
        continue;
      }
      e.status = status;
      if (at.step !== undefined) e.step = at.step;
      if (at.reason !== undefined) e.reason = at.reason;
      this.dirty.add(e.id);
    }
  }
}
