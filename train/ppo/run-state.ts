/**
 * The state of one `train_ppo` run as types only: what the loops share ({@link RunContext}), what
 * a checkpoint stores ({@link RunState}), where numbers go ({@link RunLog}) and what a finished run
 * reports ({@link RunSummary}). The logic that fills them is in `context.ts`; every part of the
 * driver imports the types from here, so none of them imports back.
 *
 * @module
 */
import type { KlController } from '../../algorithms/kl.ts';
import type { RewardNormalizer } from '../../algorithms/reward-normalizer.ts';
import type { PromptItem } from '../../roles/rollout.ts';
import type { JobReport } from '../../ops/metrics.ts';
import type { DataPosition, PromptSampler } from './data.ts';
import type { EpisodeSample } from '../../roles/episode-report.ts';
import type { EpisodeLedger, LedgerCounts, LedgerEntry } from './ledger.ts';
import type { TrainPpoOptions } from './options.ts';
import type { PolicyUpdate, Roles } from './roles.ts';
import type { RunConfig } from './run-config.ts';

/** What carries over from one update to the next besides the weights. */
export interface UpdateState {
  kl: KlController;
  /** Running reward statistics (`--normalize-reward`). */
  rewardNormalizer?: RewardNormalizer;
}

/** Where a run's numbers go: the head's metrics API, and lines on the terminal. */
export interface RunLog {
  metric(step: number, values: Record<string, number>): void;
  line(text: string): void;
  /** A step's sample episodes (`--log-samples`); not kept when absent. */
  samples?(step: number, samples: EpisodeSample[]): void;
  /** What the run says about itself (total steps, config table, outputs) for the job page. */
  report?(fields: JobReport): void;
  /** Episodes of the run's ledger that changed (stored in the session database); none when absent. */
  ledger?(entries: LedgerEntry[]): void;
}

/** What a finished run reports. */
export interface RunSummary {
  steps: number;
  minutes: number;
  evalBefore?: number;
  evalAfter?: number;
  rewardFirst?: number;
  rewardLast?: number;
  /** Episodes that threw or timed out. */
  episodesFailed: number;
  /** Groups not trained on because one of their episodes failed. */
  groupsDropped: number;
  /** Prompt indices trained on, in order (exactly-once accounting). */
  trainedPrompts: number[];
  /** Rollout processes that died and were restarted. */
  rolloutRestarts: number;
  savePath: string;
}

/** Mutable state of a run; what a checkpoint stores besides the weights. */
export interface RunState {
  step: number;
  position: DataPosition;
  klCoef: number;
  episodes: number;
  /** Episodes that threw or timed out. */
  failed: number;
  /** Groups dropped because an episode of theirs failed (absent in older checkpoints). */
  groupsDropped?: number;
  trainedPrompts: number[];
  /** Rollout processes restarted after dying. */
  rolloutRestarts: number;
  /** Group runs lost with a dead rollout and run again. */
  groupsRerun: number;
  /** Running reward statistics of `--normalize-reward`. */
  rewardStats?: { count: number; mean: number; m2: number };
  /** Tokens generated so far by successful episodes (absent in older checkpoints). */
  tokensTotal?: number;
  /** The episode ledger's counts at this step (`ledger.ts`; absent in older checkpoints). */
  ledger?: LedgerCounts;
}

/** A rollout's watchdog: how many calls hold it and its next probe. */
export interface Watchdog {
  holders: number;
  timer: NodeJS.Timeout | undefined;
}

/** Everything a loop needs. */
export interface RunContext extends UpdateState {
  /** The run's compiled config (`run-config.ts`): flags, resolved library options, length. */
  config: RunConfig;
  /** `config.flags`, which most of the loops read. */
  o: TrainPpoOptions;
  roles: Roles;
  log: RunLog;
  sampler: PromptSampler;
  evalItems: PromptItem[];
  state: RunState;
  /**
   * The last step that finished (its metrics logged): `state.step` already counts the step in
   * progress, so a stop reports this one.
   */
  stepsDone?: number;
  started: number;
  summary: RunSummary;
  /** Restarts so far per rollout, and the restart in progress per rollout. */
  restarts: number[];
  restarting: Map<number, Promise<void>>;
  /**
   * The weights every engine holds (last pushed to all); a restarted rollout gets them. Unset
   * until the first publish: the engines then hold the pretrained weights, version 0.
   */
  published?: PolicyUpdate;
  /** Rollout incarnations killed for not answering (`i:incarnation`), and their watchdogs. */
  hung?: Set<string>;
  watching?: Map<number, Watchdog>;
  /** The run's episode ledger (`ledger-run.ts`). */
  ledger?: EpisodeLedger;
  /** Set once a stop was asked for (`preempt.ts`): the loops start no further training. */
  stopRequested?: boolean;
  /** The checkpoint being written by `--save-steps`, if one is. */
  saving?: Promise<string>;
}
