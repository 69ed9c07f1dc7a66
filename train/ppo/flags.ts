/**
 * `train_ppo`'s command line, parsed once: OpenRLHF's names in kebab case (snake_case spellings
 * accepted), validated before anything starts, so a bad combination fails in a second with a
 * message that names the flag. `ASYNC_NUM_TASKS` and `ASYNC_QUEUE_SIZE` are read from the
 * environment when the flags are not given. The flags themselves are the rows of
 * `flag-table.ts`; what a parse returns ({@link ParsedTrainPpoArgs}: the options and which flags
 * set them) is all that downstream reads, so nothing parses argv again (the job's config table,
 * {@link flagConfig}, takes the parse's `given`).
 *
 * @module
 */
import {
  engineSpec,
  ggufEngineNames,
  weightBroadcastEngineNames,
  runsInProcess,
  serverEngineNames,
} from '../../engines/registry.ts';
import { checkRolloutDtype, FlagError, flagParser, quoteTyped } from '../driver-flags.ts';
import { builtinDatasets } from '../data/arith.ts';
import { nearMissFlags } from '../foreign-flags.ts';
import { openrlhfDottedFlags } from './dotted-flags.ts';
import { loraSpecOf } from '../lora-flags.ts';
import type { LoraSpec } from '../../model/lora-spec.ts';
import { GROUP_ESTIMATORS } from '../../algorithms/advantages.ts';
import { policyLossSpec } from '../../algorithms/policy-loss-types.ts';
import { libraryConfig, type LibraryConfig } from './options.ts';
import {
  type FlagSection,
  flagTable,
  trainPpoDefaults,
  type TrainPpoOptions,
} from './flag-table.ts';

export {
  type Flag,
  type FlagSection,
  flagTable,
  trainPpoDefaults,
  type TrainPpoOptions,
} from './flag-table.ts';

/** Section titles of `--help`. */
const sectionTitles: Record<FlagSection, string> = {
  run: 'Run',
  data: 'Prompt data',
  rollout: 'Rollout',
  algorithm: 'Algorithm (formulas: algorithms/README.md)',
  optimizer: 'Optimizer',
  async: 'Async training',
  eval: 'Evaluation and checkpoints',
  engines: 'Engines and placement',
  trackers: 'Experiment trackers (train/trackers/README.md)',
};

export { FlagError };

/**
 * The parser the table makes (kinds, choices, minimums, aliases, environment variables, `--help`);
 * {@link parseTrainPpoArgs} runs it and then the cross-flag checks.
 */
export const trainPpoFlagParser = flagParser('train_ppo', flagTable, trainPpoDefaults, {
  sectionTitles,
  note: "snake_case spellings and OpenRLHF v0.11's dotted names (--actor.adam.lr) are accepted too; [OpenRLHF: x] marks a default that differs",
  dotted: openrlhfDottedFlags,
});

/**
 * What the one parse of a command line yields: the validated options, the keys it set, and the
 * library's option objects resolved from them (the driver compiles all three into its
 * `RunConfig`, `run-config.ts`).
 */
export interface ParsedTrainPpoArgs {
  options: TrainPpoOptions;
  /** The keys the command line set (the rest are defaults or environment variables). */
  given: ReadonlySet<keyof TrainPpoOptions>;
  /** The loss, KL, experience and value options and the LoRA spec, each resolved once here. */
  library: LibraryConfig;
}

/**
 * Parses `argv` (without the program name) and the environment into validated options and the
 * keys the command line set: the one parse of a process (the driver, or `rtjob submit`'s check).
 *
 * @example
 * const { options, given } = parseTrainPpoArgs(['--agent-func', './examples/agent.ts'], process.env);
 */
export function parseTrainPpoArgs(
  argv: readonly string[],
  env: Record<string, string | undefined> = {},
): ParsedTrainPpoArgs {
  const { options, given, spelled } = trainPpoFlagParser.parse(argv, env);
  try {
    const library = validate(options, given);
    return { options, given, library };
  } catch (err) {
    throw err instanceof FlagError ? quoteTyped(err, spelled) : err;
  }
}

/**
 * The options alone of {@link parseTrainPpoArgs}.
 *
 * @example
 * parseTrainPpoFlags(['--agent-func', './examples/agent.ts', '--n_samples_per_prompt=8'], process.env)
 */
export function parseTrainPpoFlags(
  argv: readonly string[],
  env: Record<string, string | undefined> = {},
): TrainPpoOptions {
  return parseTrainPpoArgs(argv, env).options;
}

/** Fails with a {@link FlagError} naming `flag`. */
const fail = (flag: string, msg: string): never => {
  throw new FlagError(flag, msg);
};

/**
 * The cross-flag rules, each a named check; the first broken one fails the parse. Returns the
 * library's options, which the checks resolve.
 */
function validate(o: TrainPpoOptions, given: Set<keyof TrainPpoOptions>): LibraryConfig {
  checkBatches(o);
  checkRunLength(o, given);
  checkEvalData(o, given);
  // LoRA flags: an unknown target module, a bad --load-lora or one contradicted by --lora-rank.
  const lora = loraSpecOf(o, o.pretrain, given as Set<string>, o.seed);
  const library = checkAlgorithm(o, given, lora);
  checkAsync(o);
  checkEngines(o);
  checkRewards(o);
  checkSchedule(o, given);
  resolveRanks(o, given, 'actor');
  resolveRanks(o, given, 'critic');
  if (o.zeroStage > 2)
    fail(
      '--zero-stage',
      `--zero_stage ${o.zeroStage}: stage 3 (parameters sharded, gathered per layer) is not implemented; use 1 or 2`,
    );
  for (const [flag, n] of [
    ['--actor-num-replicas', o.actorNumReplicas],
    ['--critic-num-replicas', o.criticNumReplicas],
  ] as const) {
    if (n > 1 && o.inProcess)
      fail(
        flag,
        `${flag} ${n} needs the cluster: data-parallel ranks are separate processes (drop --in-process)`,
      );
  }
  return library;
}

/** Group size and the batch sizes against what a step makes. */
function checkBatches(o: TrainPpoOptions): void {
  if (GROUP_ESTIMATORS.includes(o.advantageEstimator) && o.nSamplesPerPrompt < 2) {
    fail(
      '--advantage-estimator',
      `--advantage-estimator ${o.advantageEstimator} needs a group: set --n-samples-per-prompt > 1 (got ${o.nSamplesPerPrompt})`,
    );
  }
  const samples = o.rolloutBatchSize * o.nSamplesPerPrompt;
  if (o.trainBatchSize > samples && !o.asyncTrain) {
    fail(
      '--train-batch-size',
      `--train-batch-size ${o.trainBatchSize} exceeds the ${samples} samples a step makes (--rollout-batch-size × --n-samples-per-prompt)`,
    );
  }
  if (o.microTrainBatchSize > o.trainBatchSize) {
    fail(
      '--micro-train-batch-size',
      `--micro-train-batch-size ${o.microTrainBatchSize} exceeds --train-batch-size ${o.trainBatchSize}`,
    );
  }
  if (o.maxSteps === 0) fail('--max-steps', '--max-steps must be -1 or >= 1');
}

/**
 * OpenRLHF's run length: `--num-episodes` passes over the data, so with it and no `--max-steps`
 * the steps come from the data size (`--max-steps -1`); a step count beside it is a conflict.
 */
function checkRunLength(o: TrainPpoOptions, given: Set<keyof TrainPpoOptions>): void {
  if (!given.has('numEpisodes')) return;
  if (given.has('maxSteps') && o.maxSteps !== -1)
    fail(
      '--max-steps',
      `--max-steps ${o.maxSteps} and --num-episodes ${o.numEpisodes} both set the run length: give one (--num-episodes runs the data ${o.numEpisodes} time(s), as OpenRLHF)`,
    );
  o.maxSteps = -1;
}

/**
 * OpenRLHF evaluates nothing without `--eval_dataset`: the built-in held-out set goes with the
 * built-in prompts only, so the user's own `--prompt-data` is not judged on arith (nor checked
 * against its keys) unless `--eval-dataset` names a set.
 */
function checkEvalData(o: TrainPpoOptions, given: Set<keyof TrainPpoOptions>): void {
  if (given.has('evalDataset') || !given.has('promptData')) return;
  const parts = o.promptData.split(',').map((p) => p.trim());
  if (!parts.every((p) => Object.hasOwn(builtinDatasets, p))) o.evalDataset = '';
}

/**
 * The loss, KL and distillation settings, with the library's own checks: returns them resolved
 * (`libraryConfig`).
 */
function checkAlgorithm(
  o: TrainPpoOptions,
  given: Set<keyof TrainPpoOptions>,
  lora: LoraSpec | undefined,
): LibraryConfig {
  // A loss's own aggregation default (GSPO's and SAPO's average per sequence; its table entry)
  // reaches the critic too; a given --loss-agg-mode is kept.
  if (!given.has('lossAggMode'))
    o.lossAggMode = policyLossSpec(o.policyLossType).lossAggMode ?? o.lossAggMode;
  if (!o.teacherPretrain && (given.has('teacherKlCoef') || given.has('taskRewardCoef'))) {
    fail('--teacher-pretrain', '--teacher-kl-coef and --task-reward-coef need --teacher-pretrain');
  }
  const library = libraryConfig(o, lora);
  const [lo, hi] = o.dynamicFilteringRewardRange;
  if (lo >= hi)
    fail(
      '--dynamic-filtering-reward-range',
      `--dynamic-filtering-reward-range: low ${lo} must be below high ${hi}`,
    );
  if (o.useKlLoss && o.initKlCoef === 0)
    fail('--use-kl-loss', '--use-kl-loss needs --init-kl-coef > 0');
  return library;
}

/** The flags that apply to `--async-train` only. */
function checkAsync(o: TrainPpoOptions): void {
  if (o.partialRollout && !o.asyncTrain)
    fail('--partial-rollout', '--partial-rollout applies to --async-train only');
  if (o.maxHeadOffpolicyness !== undefined && !o.asyncTrain) {
    fail('--max-head-offpolicyness', '--max-head-offpolicyness applies to --async-train only');
  }
  if (o.useDecoupledLoss && !o.asyncTrain)
    fail('--use-decoupled-loss', '--use-decoupled-loss applies to --async-train only');
}

/** `--engine` and what each kind needs: servers to reach or to launch, a dtype, a device. */
function checkEngines(o: TrainPpoOptions): void {
  const local = runsInProcess(o.engine);
  if (!local && !o.engineUrl && !o.engineLaunch)
    fail('--engine-url', `--engine ${o.engine} needs --engine-url or --engine-launch`);
  if (o.engineLaunch !== undefined) {
    if (local) fail('--engine-launch', `--engine-launch needs ${serverEngineNames()}`);
    if (o.engineUrl !== undefined)
      fail('--engine-launch', '--engine-launch starts the servers: drop --engine-url');
    if (!o.engineLaunch.includes('{port}'))
      fail('--engine-launch', '--engine-launch: the command must listen on {port}');
  }
  checkRolloutDtype(o);
  if (o.llamacppGpu !== undefined && !engineSpec(o.engine).gguf)
    fail('--llamacpp-gpu', `--llamacpp-gpu applies to ${ggufEngineNames()} only`);
  if (o.vllmSyncBackend !== undefined && o.vllmSyncBackend !== 'disk') {
    if (!engineSpec(o.engine).weightBroadcast)
      fail(
        '--vllm-sync-backend',
        `--vllm-sync-backend ${o.vllmSyncBackend} applies to ${weightBroadcastEngineNames()} only`,
      );
  }
  if (o.engineUrl !== undefined) {
    if (local) fail('--engine-url', `--engine-url needs ${serverEngineNames()}`);
    const urls = engineUrls(o);
    const bad = badEngineUrl(urls);
    if (bad !== undefined) fail('--engine-url', `--engine-url: '${bad}' is not an http(s) URL`);
    if (o.rolloutNumEngines > urls.length) {
      fail(
        '--rollout-num-engines',
        `--rollout-num-engines ${o.rolloutNumEngines} exceeds the ${urls.length} server(s) in --engine-url (each rollout needs at least one)`,
      );
    }
  }
}

/** Where rewards come from (an agent file or `--remote-rm-url`) and the agents' fractions. */
function checkRewards(o: TrainPpoOptions): void {
  if (o.remoteRmUrl !== undefined) {
    if (o.agentFunc !== undefined)
      fail(
        '--remote-rm-url',
        '--remote-rm-url scores answers without an agent: drop --agent-func, or score in the agent file',
      );
    const urls = splitUrls(o.remoteRmUrl);
    const bad = badEngineUrl(urls);
    if (urls.length === 0 || bad !== undefined)
      fail(
        '--remote-rm-url',
        `--remote-rm-url: '${bad ?? o.remoteRmUrl}' is not an http(s) URL (a reward function in a file is an --agent-func step function)`,
      );
  }
  if (o.agentTurnDiscount > 1)
    fail('--agent-turn-discount', '--agent-turn-discount is a factor in [0, 1]');
  if (o.agentErrorBudget > 1)
    fail('--agent-error-budget', '--agent-error-budget is a fraction in [0, 1]');
}

/** Sampling temperature against group size, and the learning-rate schedule. */
function checkSchedule(o: TrainPpoOptions, given: Set<keyof TrainPpoOptions>): void {
  if (o.temperature === 0 && o.nSamplesPerPrompt > 1 && given.has('temperature')) {
    fail(
      '--temperature',
      '--temperature 0 makes every sample of a group identical; use > 0 with --n-samples-per-prompt > 1',
    );
  }
  if (o.lrWarmupRatio > 1) fail('--lr-warmup-ratio', '--lr-warmup-ratio is a fraction in [0, 1]');
  if (o.lrScheduler === 'constant' && o.lrWarmupRatio > 0 && given.has('lrWarmupRatio'))
    fail(
      '--lr-warmup-ratio',
      '--lr-scheduler constant has no warmup (as in HF transformers): use constant_with_warmup',
    );
}

/**
 * OpenRLHF's spelling of a data-parallel role: `--actor-num-nodes M --actor-num-gpus-per-node G`
 * (G a whole number) is M × G ranks of one GPU each, so it sets `--actor-num-replicas` (which
 * says the same on a machine without GPUs). A share of a GPU (G < 1) is one rank per node.
 */
function resolveRanks(
  o: TrainPpoOptions,
  given: Set<keyof TrainPpoOptions>,
  role: 'actor' | 'critic',
): void {
  const nodes = role === 'actor' ? o.actorNumNodes : o.criticNumNodes;
  const perNode = role === 'actor' ? o.actorNumGpusPerNode : o.criticNumGpusPerNode;
  const replicas: keyof TrainPpoOptions =
    role === 'actor' ? 'actorNumReplicas' : 'criticNumReplicas';
  const flag = (what: string) => `--${role}-${what}`;
  if (perNode >= 1 && !Number.isInteger(perNode)) {
    throw new FlagError(
      flag('num-gpus-per-node'),
      `${flag('num-gpus-per-node')} ${perNode}: give whole GPUs (one rank each), or a share below 1`,
    );
  }
  if (perNode < 1 && nodes > 1) {
    throw new FlagError(
      flag('num-nodes'),
      `${flag('num-nodes')} ${nodes} places ranks of one GPU on each node: set ${flag('num-gpus-per-node')} >= 1 (without GPUs, use ${flag('num-replicas')})`,
    );
  }
  const ranks = perNode >= 1 ? nodes * perNode : o[replicas];
  if (given.has(replicas) && o[replicas] !== ranks) {
    throw new FlagError(
      flag('num-replicas'),
      `${flag('num-replicas')} ${o[replicas]} disagrees with ${flag('num-nodes')} × ${flag('num-gpus-per-node')} = ${ranks}; give one or the other`,
    );
  }
  o[replicas] = ranks;
}

/** The servers of `--engine-url`, in order. */
export function engineUrls(o: { engineUrl?: string | undefined }): string[] {
  return splitUrls(o.engineUrl ?? '');
}

/** The URLs of a comma-separated list (`--engine-url`, `--remote-rm-url`), trailing slashes off. */
export function splitUrls(list: string): string[] {
  return list
    .split(',')
    .map((u) => u.trim().replace(/\/+$/, ''))
    .filter(Boolean);
}

/** The first of `urls` that is not an http(s) URL, if any (`--engine-url` of train_ppo and serve). */
export function badEngineUrl(urls: string[]): string | undefined {
  return urls.find((u) => !/^https?:\/\/[^/\s]+/.test(u));
}

/** One effective setting of a run, for the job page's config table. */
export interface FlagConfigRow {
  name: string;
  value: string;
  default: string;
  /** `flag`: given on the command line; `env`: read from its environment variable; else the default. */
  source: 'flag' | 'env' | 'default';
  section: FlagSection;
  help: string;
}

/**
 * Every flag's effective value in `o` (after defaults resolved), where it came from, and its
 * default; `given` is what the run's one parse ({@link parseTrainPpoArgs}) says its command line set.
 */
export function flagConfig(
  o: TrainPpoOptions,
  given: ReadonlySet<keyof TrainPpoOptions>,
  env: Record<string, string | undefined> = {},
): FlagConfigRow[] {
  const show = (v: unknown): string =>
    v === undefined ? '' : Array.isArray(v) ? v.join(' ') : String(v);
  return flagTable.map((f) => ({
    name: trainPpoFlagParser.flagName(f.key),
    value: f.secret && o[f.key] !== undefined && o[f.key] !== f.bare ? '(hidden)' : show(o[f.key]),
    default: show(f.default),
    source: given.has(f.key) ? 'flag' : f.env && env[f.env] ? 'env' : 'default',
    section: f.section,
    help: f.help + (f.env ? ` [env ${f.env}]` : ''),
  }));
}

/** The `--help` text, ending with the OpenRLHF flags rtjob spells differently. */
export function trainPpoHelp(): string {
  const nearMisses = Object.entries(nearMissFlags).map(
    ([name, ours]) => `  OpenRLHF --${name.replace(/-/g, '_')}: ${ours}`,
  );
  return [
    trainPpoFlagParser.help(),
    '',
    'OpenRLHF flags spelled differently here (README: "Porting an OpenRLHF script"):',
    ...nearMisses,
  ].join('\n');
}
