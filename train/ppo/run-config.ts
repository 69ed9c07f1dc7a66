/**
 * A run's config, compiled once in the driver (Temporal's compiled worker options): the flags as
 * parsed (`flags.ts`, the one parse of the process) with the paths the driver resolves
 * (`main.ts resolveOptions`), the library's option objects the parse resolved
 * (`options.ts libraryConfig`), and what depends on the run's length. The loops read it from
 * their context and each role's init takes the resolved pieces it needs (`roles.ts roleInits`):
 * nothing downstream parses a flag or runs a resolver again.
 *
 * @module
 */
import type { LrScheduleOptions } from '../../model/lr-schedule.ts';
import { loraSpecOf } from '../lora-flags.ts';
import { engineUrls, splitUrls } from './flags.ts';
import { libraryConfig, lrScheduleOptions, type LibraryConfig } from './options.ts';
import { runRoles, type RunRoles } from './placement.ts';
import type { TrainPpoOptions } from './flag-table.ts';

/** A run's settings, parsed and resolved once: what the loops and the role inits read. */
export interface RunConfig extends LibraryConfig {
  /** The flags (with `--pretrain`, `--save-path` and `--ckpt-path` resolved by the driver). */
  readonly flags: TrainPpoOptions;
  /** The keys the command line set (the rest are defaults or environment variables). */
  readonly given: ReadonlySet<keyof TrainPpoOptions>;
  /** The run's global steps (`--max-steps`, or the episodes' full rollout batches). */
  readonly totalSteps: number;
  /** The trainer's and the critic's learning-rate schedule over the run's optimizer steps. */
  readonly lrSchedule: Omit<LrScheduleOptions, 'lr'>;
  /** The `--engine-url` servers each rollout owns (rollout `i` takes every `N`-th from `i`). */
  readonly engineShares: readonly (readonly string[])[];
  /** The `--remote-rm-url` reward servers (empty: none). */
  readonly remoteRmUrls: readonly string[];
  /** Which roles run beside the rollouts and the trainer. */
  readonly roles: RunRoles;
}

/** What {@link compileRunConfig} takes from the parse besides the options. */
export interface ParsedParts {
  given?: ReadonlySet<keyof TrainPpoOptions>;
  /** The parse's resolved library options; left out (a test, a custom driver), resolved here. */
  library?: LibraryConfig;
}

/**
 * Compiles a run's config from its flags and length. The driver passes its parse's `library`,
 * so the library's resolvers run once per process; options alone are resolved here.
 *
 * @example
 * const args = parseTrainPpoArgs(argv, process.env);
 * const config = compileRunConfig(args.options, 20, args);
 */
export function compileRunConfig(
  flags: TrainPpoOptions,
  totalSteps: number,
  parsed: ParsedParts = {},
): RunConfig {
  const given = parsed.given ?? new Set<keyof TrainPpoOptions>();
  const library =
    parsed.library ??
    libraryConfig(flags, loraSpecOf(flags, flags.pretrain, given as Set<string>, flags.seed));
  // The spec names the base the driver resolved (a shipped model's short name becomes its path).
  const lora = library.lora && {
    ...library.lora,
    config: { ...library.lora.config, baseModel: flags.pretrain },
  };
  const urls = engineUrls(flags);
  return {
    ...library,
    lora,
    flags,
    given,
    totalSteps,
    lrSchedule: lrScheduleOptions(flags, totalSteps),
    engineShares: Array.from({ length: flags.rolloutNumEngines }, (_, i) =>
      urls.filter((_, k) => k % flags.rolloutNumEngines === i),
    ),
    remoteRmUrls: splitUrls(flags.remoteRmUrl ?? ''),
    roles: runRoles(flags),
  };
}
