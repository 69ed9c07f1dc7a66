/**
 * The one declaration of every `train_ppo` flag: a row holds its name (the options key, OpenRLHF's
 * flag in kebab case), kind, default, help line, `--help` section and checks, and, for a setting
 * of a library option object, which one it goes to (`lib(['loss'], 'epsClip', …)`: the row takes
 * its default from `ppoLossDefaults` and its value reaches the trainer's `PpoLossOptions` under the
 * same name). {@link TrainPpoOptions}, the parsed options, is derived from the rows, so a flag is
 * written once here; `flags.ts` parses and validates, `options.ts` maps the rest to the roles.
 *
 * Longer than most files on purpose: it is the one table of every flag, which `--help`, the
 * parser, the job's config table, the docs test and the role options all read.
 *
 * @module
 */
import type { FlagKind, FlagSpec } from '../driver-flags.ts';
import { loraFlagDefaults, loraFlagSpecs, type LoraFlagOptions } from '../lora-flags.ts';
import { trackerFlags, type TrackerOptions } from '../trackers/index.ts';

import { ADVANTAGE_ESTIMATORS, advantageDefaults } from '../../algorithms/advantages.ts';
import { distillDefaults } from '../../algorithms/distillation.ts';
import { experienceDefaults } from '../../algorithms/experience.ts';
import { klDefaults, KL_ESTIMATORS } from '../../algorithms/kl.ts';
import { LOSS_AGGREGATIONS } from '../../algorithms/loss-aggregation.ts';
import { IS_CORRECTIONS, ppoLossDefaults } from '../../algorithms/policy-loss.ts';
import {
  POLICY_LOSS_TYPES,
  policyLossAliases,
  policyLossSpec,
} from '../../algorithms/policy-loss-types.ts';
import { valueLossDefaults } from '../../algorithms/value-loss.ts';
import { weightSyncBackends } from '../../engines/http/distributed-weights.ts';
import { defaultEngineKind, offeredEngineKinds } from '../../engines/registry.ts';
import { ggufDtypes } from '../../model/gguf/index.ts';
import { LR_SCHEDULERS } from '../../model/lr-schedule.ts';
import { remoteRewardDefaults } from '../../rewards/remote.ts';

/** Where a flag is listed in `--help`; `algorithm` flags are the ones `algorithms/README.md` documents. */
export type FlagSection =
  | 'run'
  | 'data'
  | 'rollout'
  | 'algorithm'
  | 'optimizer'
  | 'async'
  | 'eval'
  | 'engines'
  | 'trackers';

/**
 * The library option objects a flag can set under its own name, each with the defaults its
 * library module declares: `loss` the trainer's `PpoLossOptions`, `kl` the KL controller's
 * `KlOptions`, `experience` the reward shaping's `ExperienceOptions`, `distill` `DistillOptions`.
 */
export const libraryDefaults = {
  loss: ppoLossDefaults,
  kl: klDefaults,
  experience: experienceDefaults,
  distill: distillDefaults,
} as const;

/** A library option object a row feeds (see {@link libraryDefaults}). */
export type LibraryOptions = keyof typeof libraryDefaults;

/** One row of the flag table: `K` is the options key, `T` the value's type. */
export interface Flag<K extends string = string, T = unknown> extends FlagSpec<K> {
  section: FlagSection;
  /** The value when neither the command line nor the flag's environment variable sets it. */
  default: T;
  /** The library option objects that take the value under the same key. */
  to?: readonly LibraryOptions[];
}

/** `number` for a numeric literal type (`remoteRewardDefaults` is `as const`), else `T`. */
type Widen<T> = T extends number ? number : T extends boolean ? boolean : T;
type Extra = Omit<Partial<FlagSpec>, 'key' | 'kind' | 'help' | 'section'>;

let section: FlagSection = 'run';

/** A row of the current section. */
const F = <K extends string, T>(
  key: K,
  kind: FlagKind,
  value: T,
  help: string,
  extra: Extra = {},
): Flag<K, Widen<T>> => ({ key, section, kind, help, default: value as Widen<T>, ...extra });

/** A row that sets the library options `to` under `key`, with the first one's default. */
const lib = <L extends LibraryOptions, K extends keyof (typeof libraryDefaults)[L] & string>(
  to: readonly L[],
  key: K,
  kind: FlagKind,
  help: string,
  extra: Extra = {},
): Flag<K, Widen<(typeof libraryDefaults)[L][K]>> =>
  ({
    ...F(key, kind, libraryDefaults[to[0]!][key], help, extra),
    to,
  }) as Flag<K, Widen<(typeof libraryDefaults)[L][K]>>;

/** A default with no value: the flag's type is `T | undefined`. */
const unset = <T>(): T | undefined => undefined;
/** A default among `choices`, typed as their union. */
const one = <C extends string>(_choices: readonly C[], value: NoInfer<C>): C => value;
/** A default pair of numbers. */
const pair = (lo: number, hi: number): [number, number] => [lo, hi];

/** Sets the section of the rows that follow (keeps the table below one readable list). */
const under = (next: FlagSection): [] => ((section = next), []);

const SAVE_DTYPES = ['float32', 'bfloat16'] as const;

/** `ppo PPO clip, …, sapo soft gate; gspo and sapo default --loss-agg-mode to …`, from the table. */
function lossHelp(): string {
  const list = POLICY_LOSS_TYPES.map((t) => `${t} ${policyLossSpec(t).summary}`).join(', ');
  const byAgg = new Map<string, string[]>();
  for (const t of POLICY_LOSS_TYPES) {
    const agg = policyLossSpec(t).lossAggMode;
    if (agg) byAgg.set(agg, [...(byAgg.get(agg) ?? []), t]);
  }
  const own = [...byAgg].map(
    ([agg, ts]) => `${ts.join(' and ')} default --loss-agg-mode to ${agg}`,
  );
  return [list, ...own].join('; ');
}
const LLAMACPP_GPUS = ['off', 'auto', 'cuda', 'vulkan'] as const;

/** The rows up to the LoRA flags, which `train/lora-flags.ts` declares. */
const beforeLora = [
  ...under('run'),
  F(
    'pretrain',
    'string',
    '',
    'policy model directory (HF format); default: the shipped warm-start model',
  ),
  F(
    'agentFunc',
    'string',
    unset<string>(),
    'agent file: a step function, a Workflow class, or agent(sample, env) for any OpenAI client',
    { aliases: ['agent-func-path'] },
  ),
  F(
    'maxSteps',
    'int',
    30,
    'stop after this many steps; -1: from the data size and --num-episodes (the default when --num-episodes is given)',
    { min: -1 },
  ),
  F('seed', 'int', 42, 'random seed', { min: 0 }),
  F(
    'inProcess',
    'bool',
    false,
    'run every role in the driver process (no cluster; for tests and debugging)',
  ),
  ...under('data'),
  F(
    'promptData',
    'string',
    'arith',
    "prompt datasets, comma-separated: a file (parquet, JSONL, JSON, CSV), a directory in the Hub's layout (DIR@CONFIG picks a config folder, e.g. gsm8k@main), or a built-in name (arith)",
    { aliases: ['prompt-dataset'] },
  ),
  F('promptSplit', 'string', 'train', 'split of --prompt-data read from a directory (OpenRLHF)'),
  F(
    'promptDataProbs',
    'string',
    unset<string>(),
    'blend --prompt-data a,b by these probabilities, e.g. 0.7,0.3 (interleaved until every dataset is read through, as OpenRLHF); unset: concatenated',
  ),
  F(
    'maxSamples',
    'int',
    unset<number>(),
    'records read at most from each dataset and from the blend (OpenRLHF); default all',
    { min: 1 },
  ),
  F('inputKey', 'string', 'prompt', 'record field holding the prompt', { openrlhf: 'input' }),
  F('labelKey', 'string', 'solution', 'record field handed to the agent as the label', {
    openrlhf: 'none',
  }),
  F('applyChatTemplate', 'bool', true, "render prompts with the tokenizer's chat template", {
    openrlhf: 'false',
  }),
  F(
    'numEpisodes',
    'int',
    1,
    'passes over the prompt data: sets the run length (as --max-steps -1) unless --max-steps is given',
    { min: 1 },
  ),
  F('promptMaxLen', 'int', 64, 'prompt tokens kept (the tail)', { min: 1, openrlhf: '1024' }),
  ...under('rollout'),
  F('nSamplesPerPrompt', 'int', 8, 'samples per prompt (group size)', { min: 1, openrlhf: '1' }),
  F('rolloutBatchSize', 'int', 8, 'prompts per step', { min: 1, openrlhf: '1024' }),
  F('microRolloutBatchSize', 'int', 16, 'samples per forward chunk in experience making', {
    min: 1,
    openrlhf: '8',
  }),
  F('generateMaxLen', 'int', 48, 'new tokens per generation', {
    min: 1,
    aliases: ['max-new-tokens'],
    openrlhf: '1024',
  }),
  F('temperature', 'float', 1, 'sampling temperature', { min: 0 }),
  F('topP', 'float', 1, 'nucleus sampling mass', { min: 0 }),
  F('episodeTimeoutMs', 'int', 0, 'per-episode timeout in ms; 0 none', {
    min: 0,
    aliases: ['episode-timeout-ms', 'agent-timeout', 'agent-timeout-ms'],
  }),
  F('agentErrorBudget', 'float', 0.1, 'fraction of episodes allowed to fail before the job fails', {
    min: 0,
  }),
  F(
    'toolCallParser',
    'string',
    'hermes',
    'how the gateway finds tool calls in generated text (agent(sample, env) files)',
    { choices: ['hermes', 'qwen', 'none'] },
  ),
  F(
    'gatewayCheckDrift',
    'bool',
    false,
    'gateway debug: compare every turn with the recorded tokens and report drift',
  ),
  F(
    'gatewayBridge',
    'bool',
    true,
    'gateway: continue a trajectory the re-rendered history no longer extends, where provably safe (--no-gateway-bridge: a new trajectory, counted as a break)',
  ),
  F(
    'agentTurnDiscount',
    'float',
    1,
    'gateway agents: reward factor per completion before the last (1 = all share the reward)',
    { min: 0 },
  ),
  F(
    'remoteRmUrl',
    'string',
    unset<string>(),
    'instead of --agent-func: comma-separated reward services, OpenRLHF\'s protocol (POST {"query", "prompts", "labels"} -> {"rewards"}); one answer per episode; a failed request fails its episodes (--agent-error-budget)',
  ),
  F(
    'remoteRmBatchSize',
    'int',
    remoteRewardDefaults.maxBatch,
    '--remote-rm-url: answers per request at most, split across the URLs',
    {
      min: 1,
    },
  ),
  F(
    'remoteRmTimeoutMs',
    'int',
    remoteRewardDefaults.timeoutMs,
    '--remote-rm-url: limit on one request in ms',
    { min: 1 },
  ),
  F(
    'remoteRmRetries',
    'int',
    remoteRewardDefaults.retries,
    '--remote-rm-url: a request that timed out, found no server or got a 5xx/429 is sent again (to the next URL) this many times',
    { min: 0 },
  ),
  ...under('algorithm'),
  F(
    'advantageEstimator',
    'string',
    // Dr. GRPO: the least harmful setting on the shipped warm start, and what the README's runs used.
    one(ADVANTAGE_ESTIMATORS, 'dr_grpo'),
    "advantage estimator: group_norm (= grpo, as OpenRLHF's) is (score - group mean) / group std; dr_grpo and reinforce_baseline only subtract the group mean; rloo the mean of the others; gae uses the critic",
    { choices: ADVANTAGE_ESTIMATORS, choiceAliases: { grpo: 'group_norm' }, openrlhf: 'gae' },
  ),
  F(
    'advantageStdNorm',
    'bool',
    !advantageDefaults.noStdNorm,
    "divide by the std: group_norm's per-group std and the batch whitening of gae, reinforce and reinforce_baseline; --no-advantage-std-norm subtracts the mean only (unlike OpenRLHF, where group_norm always divides)",
  ),
  F('gamma', 'float', 1, 'discount', { min: 0 }),
  F('lambd', 'float', 1, 'GAE lambda', { min: 0 }),
  F('initKlCoef', 'float', 0, 'KL coefficient; 0 runs no reference model', {
    min: 0,
    openrlhf: '0.01',
  }),
  lib(['kl'], 'useKlLoss', 'bool', 'KL as a loss term instead of a reward penalty'),
  lib(['kl', 'loss'], 'klEstimator', 'string', 'KL estimator', { choices: KL_ESTIMATORS }),
  lib(
    ['kl'],
    'klTarget',
    'float',
    'target KL of the adaptive controller; unset keeps the coefficient fixed',
    { min: 0 },
  ),
  lib(['kl'], 'klHorizon', 'float', 'horizon of the adaptive KL controller, in samples', {
    min: 0,
  }),
  lib(['loss'], 'epsClip', 'float', 'PPO clip range', { min: 0 }),
  lib(['loss'], 'epsClipHigh', 'float', 'upper clip range (clip-higher); default --eps-clip', {
    min: 0,
  }),
  lib(['loss'], 'dualClip', 'float', 'dual-clip constant c > 1'),
  lib(
    ['loss'],
    'policyLossType',
    'string',
    `policy loss (OpenRLHF's flag; cispo, sapo are verl's loss_mode names, vanilla = ppo): ${lossHelp()}`,
    { choices: POLICY_LOSS_TYPES, choiceAliases: policyLossAliases },
  ),
  lib(['loss'], 'sapoTauPos', 'float', 'SAPO gate temperature for tokens with advantage > 0', {
    min: 0,
  }),
  lib(['loss'], 'sapoTauNeg', 'float', 'SAPO gate temperature for tokens with advantage <= 0', {
    min: 0,
  }),
  lib(
    ['loss'],
    'isCorrection',
    'string',
    'rollout correction of the engine/trainer mismatch: token tis/icepop (OpenRLHF), sequence seq-tis/seq-mis/geo-rs (verl rollout_corr presets)',
    { choices: IS_CORRECTIONS },
  ),
  F(
    'teacherPretrain',
    'string',
    '',
    "on-policy distillation: the teacher's model directory (same tokenizer); it scores the student's sampled tokens, placed like the reference",
  ),
  lib(
    ['distill'],
    'teacherKlCoef',
    'float',
    'weight of the per-token reverse-KL advantage log π_teacher − log π_student (with --teacher-pretrain)',
    { min: 0 },
  ),
  lib(
    ['distill'],
    'taskRewardCoef',
    'float',
    "weight of the task reward's advantage beside the teacher's; 0 distils alone",
    { min: 0 },
  ),
  F(
    'rewardPretrain',
    'string',
    '',
    "reward model directory (train_rm): its score of each episode's tokens replaces the agent's reward (OpenRLHF's --reward_pretrain); placed like the reference",
  ),
  lib(
    ['loss'],
    'isThreshold',
    'pair',
    'low and high bound of the token ratio for tis/icepop, e.g. "0.5 5"',
    { aliases: ['vllm-is-truncated-threshold'] },
  ),
  lib(
    ['loss'],
    'isSeqThreshold',
    'pair',
    "low and high bound of the sequence ratio (seq-tis, seq-mis) or its geometric mean (geo-rs); rtjob's flag; default 0.5 2, geo-rs 0.999 1.001",
  ),
  lib(['loss'], 'lossAggMode', 'string', 'how token losses are averaged', {
    choices: LOSS_AGGREGATIONS,
  }),
  lib(['loss'], 'entropyLossCoef', 'float', 'entropy bonus coefficient', { min: 0 }),
  F('valueClip', 'float', valueLossDefaults.valueClip ?? 0.5, 'value clip range', { min: 0 }),
  F('normalizeReward', 'bool', false, 'normalise scores by their running mean and std'),
  lib(['experience'], 'rewardScale', 'float', 'score = (reward + bias) * scale'),
  lib(['experience'], 'rewardBias', 'float', 'added to the reward before --reward-scale'),
  lib(['experience'], 'rewardClipRange', 'pair', 'scores are clipped to this range, e.g. "-10 10"'),
  lib(
    ['experience'],
    'overlongBufferLen',
    'int',
    'DAPO overlong penalty over the last N tokens of --generate-max-len',
    { min: 1 },
  ),
  lib(
    ['experience'],
    'overlongPenaltyFactor',
    'float',
    'DAPO overlong penalty at the length limit',
  ),
  F(
    'dynamicFiltering',
    'bool',
    false,
    'keep a group only if its mean reward lies inside the range',
  ),
  F(
    'dynamicFilteringRewardRange',
    'pair',
    pair(0, 1),
    'open range for --dynamic-filtering, e.g. "0 1"',
  ),
  F(
    'trainMaxTokensPerGpu',
    'int',
    unset<number>(),
    'token budget per micro-batch (packs samples); default: cut by --micro-train-batch-size',
    { min: 1 },
  ),
  ...under('optimizer'),
  F('trainBatchSize', 'int', 32, 'samples per optimizer step', { min: 1, openrlhf: '128' }),
  F('microTrainBatchSize', 'int', 16, 'samples per micro-batch (gradient accumulation)', {
    min: 1,
    openrlhf: '4',
  }),
  F('maxEpochs', 'int', 1, 'passes over each rollout batch', { min: 1 }),
  F('actorLearningRate', 'float', 1e-4, 'policy learning rate (the peak of --lr-scheduler)', {
    min: 0,
    openrlhf: '1e-6',
  }),
  F('criticLearningRate', 'float', 5e-4, 'critic learning rate (the peak of --lr-scheduler)', {
    min: 0,
    openrlhf: '9e-6',
  }),
  F('maxNorm', 'float', 1, 'gradient clip by global norm', { min: 0 }),
  F(
    'lrScheduler',
    'string',
    one(LR_SCHEDULERS, 'cosine_with_min_lr'),
    "learning-rate schedule of the trainer and the critic over the run's optimizer steps, as HF transformers' get_scheduler (cosine_with_min_lr decays to --min-lr-ratio x the rate; linear and cosine to 0; constant ignores warmup)",
    { choices: LR_SCHEDULERS },
  ),
  F(
    'lrWarmupRatio',
    'float',
    0,
    'fraction of the optimizer steps spent warming up linearly from 0 (rtjob defaults to 0, for short runs)',
    { min: 0, openrlhf: '0.03' },
  ),
  F('minLrRatio', 'float', 0.1, 'floor of cosine_with_min_lr, as a fraction of the learning rate', {
    min: 0,
  }),
  F('l2', 'float', 0, 'AdamW weight decay (decoupled; not on norms and biases)', { min: 0 }),
];

/** The rows after the LoRA flags, up to the trackers' (`train/trackers/`). */
const afterLora = [
  ...under('optimizer'),
  F(
    'gradientCheckpointing',
    'bool',
    false,
    "trainer and critic recompute each decoder layer's activations, and the LM head's logits 256 tokens at a time, in the backward pass (less memory: a LoRA step of Qwen3-0.6B at 2,048 tokens peaks at 1.45x its weights; ~1/3 more compute)",
  ),
  F(
    'packingSamples',
    'bool',
    false,
    "trainer and critic pack each micro-batch's samples into one row (attention within each sample, positions restarting) instead of padding",
  ),
  ...under('async'),
  F('asyncTrain', 'bool', false, 'asynchronous off-policy training'),
  F('asyncQueueSize', 'int', 1, 'batches waiting between rollout and trainer', {
    min: 1,
    env: 'ASYNC_QUEUE_SIZE',
  }),
  F('asyncNumTasks', 'int', 128, 'agent episodes at once per engine', {
    min: 1,
    env: 'ASYNC_NUM_TASKS',
  }),
  F('maxHeadOffpolicyness', 'int', unset<number>(), 'AReaL staleness throttle eta', { min: 0 }),
  F(
    'partialRollout',
    'bool',
    false,
    'interrupt generation for weight updates and continue on new weights',
  ),
  lib(['loss'], 'useDecoupledLoss', 'bool', 'decoupled PPO with proximal logprobs'),
  lib(
    ['loss'],
    'behavImpWeightCap',
    'float',
    'mask tokens whose behaviour importance weight exceeds this',
    {
      min: 1,
    },
  ),
  ...under('eval'),
  F(
    'savePath',
    'string',
    '',
    'where the final HF-format policy is written (default ./ckpt/<job id>: each run its own)',
  ),
  F('saveDtype', 'string', one(SAVE_DTYPES, 'float32'), 'tensor dtype of the saved policy', {
    choices: SAVE_DTYPES,
  }),
  F('saveSteps', 'int', -1, 'checkpoint every N steps; -1 never', { min: -1 }),
  F('ckptPath', 'string', '', 'checkpoint directory (default <save-path>/checkpoints)'),
  F('maxCkptNum', 'int', 3, 'checkpoints kept in --ckpt-path; older ones are removed', { min: 1 }),
  F(
    'preemptSaveS',
    'float',
    25,
    'on SIGTERM or SIGUSR1 (a preemption notice, `rtjob stop-job`), write a checkpoint of the last finished step within this many seconds, then exit',
    { min: 1 },
  ),
  F(
    'saveHfCkpt',
    'bool',
    false,
    'at every --save-steps, also write the policy as an HF model directory <ckpt-path>/global_step_N_hf (never removed)',
  ),
  F(
    'overwrite',
    'bool',
    false,
    'replace a policy or checkpoints a previous run left in --save-path / --ckpt-path',
  ),
  F('loadCheckpoint', 'bool', false, 'resume from the latest checkpoint in --ckpt-path'),
  F(
    'evalDataset',
    'string',
    'arith:test',
    'held-out prompts: a file, directory or built-in name as --prompt-data; "" disables',
    { openrlhf: 'none' },
  ),
  F('evalSplit', 'string', 'test', 'split of --eval-dataset read from a directory (OpenRLHF)'),
  F('evalSteps', 'int', 5, 'evaluate every N steps; -1 only at start and end', {
    min: -1,
    openrlhf: '-1',
  }),
  F('evalPrompts', 'int', 500, 'held-out prompts evaluated (greedy)', { min: 1 }),
  F('loggingSteps', 'int', 1, 'log every N steps', { min: 1 }),
  F(
    'logSamples',
    'int',
    16,
    'sample episodes kept per step for the Samples view and rtjob samples (best, worst, random; at most 250); 0 none',
    { min: 0 },
  ),
  ...under('engines'),
  F('rolloutNumEngines', 'int', 1, 'rollout engines', { min: 1, aliases: ['vllm-num-engines'] }),
  F('engine', 'string', one(offeredEngineKinds, defaultEngineKind), 'inference engine', {
    choices: offeredEngineKinds,
  }),
  F(
    'rolloutDtype',
    'string',
    one(ggufDtypes, 'f32'),
    "GGUF element type of --engine llamacpp (f32 gives the trainer's tokens; lower ones are faster)",
    { choices: ggufDtypes },
  ),
  F(
    'llamacppGpu',
    'string',
    unset<(typeof LLAMACPP_GPUS)[number]>(),
    'device of --engine llamacpp: off (the CPU build), auto (CUDA, else Vulkan), cuda or vulkan; default: auto when --rollout-num-gpus-per-engine > 0, else off',
    { choices: LLAMACPP_GPUS },
  ),
  F(
    'engineUrl',
    'string',
    unset<string>(),
    'comma-separated server URLs for --engine sglang|vllm; split across the rollouts',
  ),
  F(
    'engineLaunch',
    'string',
    unset<string>(),
    "instead of --engine-url: the command that starts each rollout's own sglang|vllm server, on the GPUs the runtime gives that rollout (--rollout-num-gpus-per-engine); {port} is a free port, {model} the --pretrain path; stopped with the rollout",
  ),
  F(
    'engineWeightsPath',
    'string',
    '',
    'where weights for sglang|vllm servers are written (a path the servers can read); default <ckpt-path>/engine_weights',
  ),
  F(
    'vllmSyncBackend',
    'string',
    unset<(typeof weightSyncBackends)[number]>(),
    "how full weights reach --engine sglang|vllm servers: nccl or gloo (broadcast from the rollout's rank 0 over a group the servers join, OpenRLHF's --vllm_sync_backend) or disk (a checkpoint they reload); default nccl where libtorch has CUDA, else disk",
    { choices: weightSyncBackends },
  ),
  F(
    'engineHealthTimeoutMs',
    'int',
    60_000,
    'a rollout that does not answer a health probe (sent while it has calls, and before each weight publish) in this time is killed and restarted',
    { min: 1 },
  ),
  F(
    'weightSyncTimeoutMs',
    'int',
    600_000,
    "limit on one weight sync (trainer snapshot, push to each rollout, the servers' reload); past it the sync fails naming the rollout, engine and phase",
    { min: 1 },
  ),
  F(
    'actorNumNodes',
    'int',
    1,
    'nodes of the trainer: with --actor-num-gpus-per-node G >= 1, nodes x G data-parallel ranks of one GPU each (as in OpenRLHF)',
    { min: 1 },
  ),
  F(
    'actorNumGpusPerNode',
    'float',
    0,
    'GPUs of the trainer per node: a whole number G gives G ranks of one GPU on each node; below 1, one rank with that share of a GPU',
    { min: 0, openrlhf: '8' },
  ),
  F('refNumGpusPerNode', 'float', 0, 'GPUs of the reference model', { min: 0, openrlhf: '8' }),
  F('criticNumNodes', 'int', 1, 'nodes of the critic (as --actor-num-nodes)', { min: 1 }),
  F(
    'criticNumGpusPerNode',
    'float',
    0,
    'GPUs of the critic per node (as --actor-num-gpus-per-node)',
    {
      min: 0,
      openrlhf: '8',
    },
  ),
  F('rolloutNumGpusPerEngine', 'float', 0, 'GPUs per rollout engine', {
    min: 0,
    aliases: ['vllm-tensor-parallel-size'],
    openrlhf: '1',
  }),
  F(
    'colocateAllModels',
    'bool',
    false,
    'one placement group for every role; the engine sleeps while training',
  ),
  F(
    'actorNumReplicas',
    'int',
    1,
    'data-parallel trainer ranks (each trains 1/N of the micro-batches; gradients all-reduced)',
    { min: 1 },
  ),
  F('criticNumReplicas', 'int', 1, 'data-parallel critic ranks', { min: 1 }),
  F(
    'zeroStage',
    'int',
    0,
    "DeepSpeed ZeRO stage of the data-parallel trainer and critic ranks, as in OpenRLHF (torch backend, c10d gloo/nccl): 0 every rank holds all of AdamW's state; 1 each of N ranks keeps AdamW's moments of 1/N of every parameter, steps it and all-gathers the weights; 2 also reduce-scatters the gradients, each rank keeping 1/N; 3 (parameters too) is not implemented. Checkpoints hold the whole state and resume at any number of ranks",
    { min: 0 },
  ),
  ...under('trackers'),
  F(
    'otlpEndpoint',
    'string',
    unset<string>(),
    "send the run's phases (generate, train, weight sync, eval) as OpenTelemetry spans, one trace per run, to this OTLP/HTTP receiver (POST URL/v1/traces, JSON); the flag alone: OTEL_EXPORTER_OTLP_ENDPOINT; auth headers OTEL_EXPORTER_OTLP_HEADERS. Not in OpenRLHF",
    { bare: 'true' },
  ),
];

type OwnRow = (typeof beforeLora)[number] | (typeof afterLora)[number];

/**
 * Resolved options of a `train_ppo` run: one field per row of the table, typed by its default
 * (the LoRA flags are `train/lora-flags.ts`'s, the tracker flags `train/trackers/`'s).
 */
export type TrainPpoOptions = { [R in OwnRow as R['key']]: R['default'] } & LoraFlagOptions &
  TrackerOptions;

/** Every flag, in the order `--help` prints them. */
export const flagTable: readonly Flag<keyof TrainPpoOptions & string>[] = [
  ...beforeLora,
  // LoRA (train/lora-flags.ts, shared with train_sft): OpenRLHF's names and defaults.
  ...loraFlagSpecs.map((f) => ({
    ...f,
    section: 'optimizer' as const,
    default: loraFlagDefaults[f.key],
  })),
  ...afterLora,
  ...trackerFlags.map((f) => ({ ...f, section: 'trackers' as const, default: undefined })),
];

/** Defaults, chosen so the README command learns on a 2-core machine within minutes. */
export const trainPpoDefaults: TrainPpoOptions = Object.fromEntries(
  flagTable.map((f) => [f.key, structuredClone(f.default)]),
) as unknown as TrainPpoOptions;

/** The keys of the rows that feed the library options `to`. */
export function libraryKeys(to: LibraryOptions): (keyof TrainPpoOptions & string)[] {
  return flagTable.filter((f) => f.to?.includes(to)).map((f) => f.key);
}
