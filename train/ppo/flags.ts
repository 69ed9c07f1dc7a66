/**
 * `train_ppo` flags: OpenRLHF's names in kebab case (snake_case spellings accepted), parsed and
 * validated before anything starts, so a bad combination fails in a second with a message that
 * names the flag. `ASYNC_NUM_TASKS` and `ASYNC_QUEUE_SIZE` are read from the environment when the
 * flags are not given.
 *
 * Longer than most files on purpose: it is the one table of every flag (section, kind, help,
 * default) and the cross-flag validation, which `--help`, the docs test and the job config
 * table all read; split, a flag's pieces would live in several places.
 *
 * @module
 */
import { checkRolloutDtype, FlagError, flagParser, type FlagSpec } from '../driver-flags.ts';
import { loraFlagDefaults, loraFlagSpecs, loraSpecOf } from '../lora-flags.ts';

import {
  ADVANTAGE_ESTIMATORS,
  advantageDefaults,
  GROUP_ESTIMATORS,
} from '../../algorithms/advantages.ts';
import { klDefaults, KL_ESTIMATORS } from '../../algorithms/kl.ts';
import { experienceDefaults } from '../../algorithms/experience.ts';
import { LOSS_AGGREGATIONS } from '../../algorithms/loss-aggregation.ts';
import { IS_CORRECTIONS, ppoLossDefaults } from '../../algorithms/policy-loss.ts';
import { POLICY_LOSS_TYPES } from '../../algorithms/policy-loss-types.ts';
import { distillDefaults } from '../../algorithms/distillation.ts';
import { valueLossDefaults } from '../../algorithms/value-loss.ts';
import { LR_SCHEDULERS } from '../../model/lr-schedule.ts';
import { remoteRewardDefaults } from '../../rewards/remote.ts';
import { checkLibraryOptions, type TrainPpoOptions } from './options.ts';
import { trackerFlags } from '../trackers/index.ts';

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
/** One row of the flag table. */
export interface Flag extends FlagSpec<keyof TrainPpoOptions> {
  section: FlagSection;
}

let section: FlagSection = 'run';
const F = (
  key: keyof TrainPpoOptions,
  kind: Flag['kind'],
  help: string,
  extra: Partial<Flag> = {},
): Flag => ({
  key,
  section,
  kind,
  help,
  ...extra,
});

/** Sets the section of the flags that follow (keeps the table below one readable list). */
const under = (next: FlagSection): [] => ((section = next), []);

/** Every flag, in the order `--help` prints them. */
export const flagTable: readonly Flag[] = [
  ...under('run'),
  F(
    'pretrain',
    'string',
    'policy model directory (HF format); default: the shipped warm-start model',
  ),
  F(
    'agentFunc',
    'string',
    'agent file: a step function, a Workflow class, or agent(sample, env) for any OpenAI client',
    { aliases: ['agent-func-path'] },
  ),
  F('maxSteps', 'int', 'stop after this many steps; -1: from the data size', { min: -1 }),
  F('seed', 'int', 'random seed', { min: 0 }),
  F(
    'inProcess',
    'bool',
    'run every role in the driver process (no cluster; for tests and debugging)',
  ),
  ...under('data'),
  F('promptData', 'string', 'JSONL file or built-in dataset name', { aliases: ['prompt-dataset'] }),
  F('inputKey', 'string', 'record field holding the prompt'),
  F('labelKey', 'string', 'record field handed to the agent as the label'),
  F('applyChatTemplate', 'bool', "render prompts with the tokenizer's chat template"),
  F('numEpisodes', 'int', 'passes over the prompt data', { min: 1 }),
  F('promptMaxLen', 'int', 'prompt tokens kept (the tail)', { min: 1 }),
  ...under('rollout'),
  F('nSamplesPerPrompt', 'int', 'samples per prompt (group size)', { min: 1 }),
  F('rolloutBatchSize', 'int', 'prompts per step', { min: 1 }),
  F('microRolloutBatchSize', 'int', 'samples per forward chunk in experience making', { min: 1 }),
  F('generateMaxLen', 'int', 'new tokens per generation', { min: 1, aliases: ['max-new-tokens'] }),
  F('temperature', 'float', 'sampling temperature', { min: 0 }),
  F('topP', 'float', 'nucleus sampling mass', { min: 0 }),
  F('episodeTimeoutMs', 'int', 'per-episode timeout in ms; 0 none', {
    min: 0,
    aliases: ['episode-timeout-ms', 'agent-timeout', 'agent-timeout-ms'],
  }),
  F('agentErrorBudget', 'float', 'fraction of episodes allowed to fail before the job fails', {
    min: 0,
  }),
  F(
    'toolCallParser',
    'string',
    'how the gateway finds tool calls in generated text (agent(sample, env) files)',
    { choices: ['hermes', 'qwen', 'none'] },
  ),
  F(
    'gatewayCheckDrift',
    'bool',
    'gateway debug: compare every turn with the recorded tokens and report drift',
  ),
  F(
    'gatewayBridge',
    'bool',
    'gateway: continue a trajectory the re-rendered history no longer extends, where provably safe (--no-gateway-bridge: a new trajectory, counted as a break)',
  ),
  F(
    'agentTurnDiscount',
    'float',
    'gateway agents: reward factor per completion before the last (1 = all share the reward)',
    { min: 0 },
  ),
  F(
    'remoteRmUrl',
    'string',
    'instead of --agent-func: comma-separated reward services, OpenRLHF\'s protocol (POST {"query", "prompts", "labels"} -> {"rewards"}); one answer per episode; a failed request fails its episodes (--agent-error-budget)',
  ),
  F(
    'remoteRmBatchSize',
    'int',
    '--remote-rm-url: answers per request at most, split across the URLs',
    {
      min: 1,
    },
  ),
  F('remoteRmTimeoutMs', 'int', '--remote-rm-url: limit on one request in ms', { min: 1 }),
  F(
    'remoteRmRetries',
    'int',
    '--remote-rm-url: a request that timed out, found no server or got a 5xx/429 is sent again (to the next URL) this many times',
    { min: 0 },
  ),
  ...under('algorithm'),
  F(
    'advantageEstimator',
    'string',
    "advantage estimator: group_norm (= grpo, as OpenRLHF's) is (score - group mean) / group std; dr_grpo and reinforce_baseline only subtract the group mean; rloo the mean of the others; gae uses the critic",
    { choices: ADVANTAGE_ESTIMATORS, choiceAliases: { grpo: 'group_norm' } },
  ),
  F(
    'advantageStdNorm',
    'bool',
    "divide by the std: group_norm's per-group std and the batch whitening of gae, reinforce and reinforce_baseline; --no-advantage-std-norm subtracts the mean only (unlike OpenRLHF, where group_norm always divides)",
  ),
  F('gamma', 'float', 'discount', { min: 0 }),
  F('lambd', 'float', 'GAE lambda', { min: 0 }),
  F('initKlCoef', 'float', 'KL coefficient; 0 runs no reference model', { min: 0 }),
  F('useKlLoss', 'bool', 'KL as a loss term instead of a reward penalty'),
  F('klEstimator', 'string', 'KL estimator', { choices: KL_ESTIMATORS }),
  F(
    'klTarget',
    'float',
    'target KL of the adaptive controller; unset keeps the coefficient fixed',
    { min: 0 },
  ),
  F('klHorizon', 'float', 'horizon of the adaptive KL controller, in samples', { min: 0 }),
  F('epsClip', 'float', 'PPO clip range', { min: 0 }),
  F('epsClipHigh', 'float', 'upper clip range (clip-higher); default --eps-clip', { min: 0 }),
  F('dualClip', 'float', 'dual-clip constant c > 1'),
  F(
    'policyLossType',
    'string',
    "policy loss (OpenRLHF's flag; cispo, sapo are verl's loss_mode names, vanilla = ppo): ppo clip, gspo sequence ratio, cispo clipped stop-gradient IS weight, sapo soft gate; gspo and sapo default --loss-agg-mode to seq-mean-token-mean",
    { choices: POLICY_LOSS_TYPES, choiceAliases: { vanilla: 'ppo' } },
  ),
  F('sapoTauPos', 'float', 'SAPO gate temperature for tokens with advantage > 0', { min: 0 }),
  F('sapoTauNeg', 'float', 'SAPO gate temperature for tokens with advantage <= 0', { min: 0 }),
  F(
    'isCorrection',
    'string',
    'rollout correction of the engine/trainer mismatch: token tis/icepop (OpenRLHF), sequence seq-tis/seq-mis/geo-rs (verl rollout_corr presets)',
    { choices: IS_CORRECTIONS },
  ),
  F(
    'teacherPretrain',
    'string',
    "on-policy distillation: the teacher's model directory (same tokenizer); it scores the student's sampled tokens, placed like the reference",
  ),
  F(
    'teacherKlCoef',
    'float',
    'weight of the per-token reverse-KL advantage log π_teacher − log π_student (with --teacher-pretrain)',
    { min: 0 },
  ),
  F(
    'taskRewardCoef',
    'float',
    "weight of the task reward's advantage beside the teacher's; 0 distils alone",
    { min: 0 },
  ),
  F(
    'rewardPretrain',
    'string',
    "reward model directory (train_rm): its score of each episode's tokens replaces the agent's reward (OpenRLHF's --reward_pretrain); placed like the reference",
  ),
  F('isThreshold', 'pair', 'low and high bound of the token ratio for tis/icepop, e.g. "0.5 5"'),
  F(
    'isSeqThreshold',
    'pair',
    "low and high bound of the sequence ratio (seq-tis, seq-mis) or its geometric mean (geo-rs); rtjob's flag; default 0.5 2, geo-rs 0.999 1.001",
  ),
  F('lossAggMode', 'string', 'how token losses are averaged', { choices: LOSS_AGGREGATIONS }),
  F('entropyLossCoef', 'float', 'entropy bonus coefficient', { min: 0 }),
  F('valueClip', 'float', 'value clip range', { min: 0 }),
  F('normalizeReward', 'bool', 'normalise scores by their running mean and std'),
  F('rewardScale', 'float', 'score = (reward + bias) * scale'),
  F('rewardBias', 'float', 'added to the reward before --reward-scale'),
  F('rewardClipRange', 'pair', 'scores are clipped to this range, e.g. "-10 10"'),
  F(
    'overlongBufferLen',
    'int',
    'DAPO overlong penalty over the last N tokens of --generate-max-len',
    { min: 1 },
  ),
  F('overlongPenaltyFactor', 'float', 'DAPO overlong penalty at the length limit'),
  F('dynamicFiltering', 'bool', 'keep a group only if its mean reward lies inside the range'),
  F('dynamicFilteringRewardRange', 'pair', 'open range for --dynamic-filtering, e.g. "0 1"'),
  F(
    'trainMaxTokensPerGpu',
    'int',
    'token budget per micro-batch (packs samples); default: cut by --micro-train-batch-size',
    { min: 1 },
  ),
  ...under('optimizer'),
  F('trainBatchSize', 'int', 'samples per optimizer step', { min: 1 }),
  F('microTrainBatchSize', 'int', 'samples per micro-batch (gradient accumulation)', { min: 1 }),
  F('maxEpochs', 'int', 'passes over each rollout batch', { min: 1 }),
  F('actorLearningRate', 'float', 'policy learning rate (the peak of --lr-scheduler)', {
    min: 0,
  }),
  F('criticLearningRate', 'float', 'critic learning rate (the peak of --lr-scheduler)', {
    min: 0,
  }),
  F('maxNorm', 'float', 'gradient clip by global norm', { min: 0 }),
  F(
    'lrScheduler',
    'string',
    "learning-rate schedule of the trainer and the critic over the run's optimizer steps, as HF transformers' get_scheduler (cosine_with_min_lr decays to --min-lr-ratio x the rate; linear and cosine to 0; constant ignores warmup)",
    { choices: LR_SCHEDULERS },
  ),
  F(
    'lrWarmupRatio',
    'float',
    'fraction of the optimizer steps spent warming up linearly from 0 (OpenRLHF defaults to 0.03; rtjob to 0, for short runs)',
    { min: 0 },
  ),
  F('minLrRatio', 'float', 'floor of cosine_with_min_lr, as a fraction of the learning rate', {
    min: 0,
  }),
  F('l2', 'float', 'AdamW weight decay (decoupled; not on norms and biases)', { min: 0 }),
  // LoRA (train/lora-flags.ts, shared with train_sft): OpenRLHF's names and defaults.
  ...loraFlagSpecs.map((f): Flag => ({ ...f, section: 'optimizer' })),
  F(
    'gradientCheckpointing',
    'bool',
    "trainer and critic recompute each decoder layer's activations in the backward pass (less memory, ~1/3 more compute)",
  ),
  F(
    'packingSamples',
    'bool',
    "trainer and critic pack each micro-batch's samples into one row (attention within each sample, positions restarting) instead of padding",
  ),
  ...under('async'),
  F('asyncTrain', 'bool', 'asynchronous off-policy training'),
  F('asyncQueueSize', 'int', 'batches waiting between rollout and trainer', {
    min: 1,
    env: 'ASYNC_QUEUE_SIZE',
  }),
  F('asyncNumTasks', 'int', 'agent episodes at once per engine', {
    min: 1,
    env: 'ASYNC_NUM_TASKS',
  }),
  F('maxHeadOffpolicyness', 'int', 'AReaL staleness throttle eta', { min: 0 }),
  F(
    'partialRollout',
    'bool',
    'interrupt generation for weight updates and continue on new weights',
  ),
  F('useDecoupledLoss', 'bool', 'decoupled PPO with proximal logprobs'),
  F('behavImpWeightCap', 'float', 'mask tokens whose behaviour importance weight exceeds this', {
    min: 1,
  }),
  ...under('eval'),
  F(
    'savePath',
    'string',
    'where the final HF-format policy is written (default ./ckpt/<job id>: each run its own)',
  ),
  F('saveDtype', 'string', 'tensor dtype of the saved policy', {
    choices: ['float32', 'bfloat16'],
  }),
  F('saveSteps', 'int', 'checkpoint every N steps; -1 never', { min: -1 }),
  F('ckptPath', 'string', 'checkpoint directory (default <save-path>/checkpoints)'),
  F('maxCkptNum', 'int', 'checkpoints kept in --ckpt-path; older ones are removed', { min: 1 }),
  F(
    'saveHfCkpt',
    'bool',
    'at every --save-steps, also write the policy as an HF model directory <ckpt-path>/global_step_N_hf (never removed)',
  ),
  F(
    'overwrite',
    'bool',
    'replace a policy or checkpoints a previous run left in --save-path / --ckpt-path',
  ),
  F('loadCheckpoint', 'bool', 'resume from the latest checkpoint in --ckpt-path'),
  F('evalDataset', 'string', 'held-out prompts (JSONL or built-in name); "" disables'),
  F('evalSteps', 'int', 'evaluate every N steps; -1 only at start and end', { min: -1 }),
  F('evalPrompts', 'int', 'held-out prompts evaluated (greedy)', { min: 1 }),
  F('loggingSteps', 'int', 'log every N steps', { min: 1 }),
  F(
    'logSamples',
    'int',
    'sample episodes kept per step for the Samples view and rtjob samples (best, worst, random; at most 250); 0 none',
    { min: 0 },
  ),
  ...under('engines'),
  F('rolloutNumEngines', 'int', 'rollout engines', { min: 1, aliases: ['vllm-num-engines'] }),
  F('engine', 'string', 'inference engine', { choices: ['builtin', 'sglang', 'vllm', 'llamacpp'] }),
  F(
    'rolloutDtype',
    'string',
    "GGUF element type of --engine llamacpp (f32 gives the trainer's tokens; lower ones are faster)",
    { choices: ['f32', 'f16', 'bf16', 'q8_0'] },
  ),
  F(
    'llamacppGpu',
    'string',
    'device of --engine llamacpp: off (the CPU build), auto (CUDA, else Vulkan), cuda or vulkan; default: auto when --rollout-num-gpus-per-engine > 0, else off',
    { choices: ['off', 'auto', 'cuda', 'vulkan'] },
  ),
  F(
    'engineUrl',
    'string',
    'comma-separated server URLs for --engine sglang|vllm; split across the rollouts',
  ),
  F(
    'engineLaunch',
    'string',
    "instead of --engine-url: the command that starts each rollout's own sglang|vllm server, on the GPUs the runtime gives that rollout (--rollout-num-gpus-per-engine); {port} is a free port, {model} the --pretrain path; stopped with the rollout",
  ),
  F(
    'engineWeightsPath',
    'string',
    'where weights for sglang|vllm servers are written (a path the servers can read); default <ckpt-path>/engine_weights',
  ),
  F(
    'engineHealthTimeoutMs',
    'int',
    'a rollout that does not answer a health probe (sent while it has calls, and before each weight publish) in this time is killed and restarted',
    { min: 1 },
  ),
  F(
    'weightSyncTimeoutMs',
    'int',
    "limit on one weight sync (trainer snapshot, push to each rollout, the servers' reload); past it the sync fails naming the rollout, engine and phase",
    { min: 1 },
  ),
  F(
    'actorNumNodes',
    'int',
    'nodes of the trainer: with --actor-num-gpus-per-node G >= 1, nodes x G data-parallel ranks of one GPU each (as in OpenRLHF)',
    { min: 1 },
  ),
  F(
    'actorNumGpusPerNode',
    'float',
    'GPUs of the trainer per node: a whole number G gives G ranks of one GPU on each node; below 1, one rank with that share of a GPU',
    { min: 0 },
  ),
  F('refNumGpusPerNode', 'float', 'GPUs of the reference model', { min: 0 }),
  F('criticNumNodes', 'int', 'nodes of the critic (as --actor-num-nodes)', { min: 1 }),
  F('criticNumGpusPerNode', 'float', 'GPUs of the critic per node (as --actor-num-gpus-per-node)', {
    min: 0,
  }),
  F('rolloutNumGpusPerEngine', 'float', 'GPUs per rollout engine', {
    min: 0,
    aliases: ['vllm-tensor-parallel-size'],
  }),
  F(
    'colocateAllModels',
    'bool',
    'one placement group for every role; the engine sleeps while training',
  ),
  F(
    'actorNumReplicas',
    'int',
    'data-parallel trainer ranks (each trains 1/N of the micro-batches; gradients all-reduced)',
    { min: 1 },
  ),
  F('criticNumReplicas', 'int', 'data-parallel critic ranks', { min: 1 }),
  ...under('trackers'),
  ...trackerFlags.map((f): Flag => ({ ...f, section: 'trackers' })),
];

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

/** Defaults, chosen so the README command learns on a 2-core machine within minutes. */
export const trainPpoDefaults: TrainPpoOptions = {
  pretrain: '',
  agentFunc: undefined,
  promptData: 'arith',
  inputKey: 'prompt',
  labelKey: 'solution',
  applyChatTemplate: true,
  nSamplesPerPrompt: 8,
  rolloutBatchSize: 8,
  microRolloutBatchSize: 16,
  trainBatchSize: 32,
  microTrainBatchSize: 16,
  maxEpochs: 1,
  numEpisodes: 1,
  maxSteps: 30,
  promptMaxLen: 64,
  generateMaxLen: 48,
  temperature: 1,
  topP: 1,
  // Dr. GRPO: the least harmful setting on the shipped warm start, and what the README's runs used.
  advantageEstimator: 'dr_grpo',
  advantageStdNorm: !advantageDefaults.noStdNorm,
  initKlCoef: 0,
  useKlLoss: klDefaults.useKlLoss,
  klEstimator: klDefaults.klEstimator,
  klTarget: klDefaults.klTarget,
  klHorizon: klDefaults.klHorizon,
  epsClip: ppoLossDefaults.epsClip,
  epsClipHigh: ppoLossDefaults.epsClipHigh,
  dualClip: ppoLossDefaults.dualClip,
  policyLossType: ppoLossDefaults.policyLossType,
  sapoTauPos: ppoLossDefaults.sapoTauPos,
  sapoTauNeg: ppoLossDefaults.sapoTauNeg,
  isCorrection: ppoLossDefaults.isCorrection,
  isThreshold: [...ppoLossDefaults.isThreshold],
  isSeqThreshold: undefined,
  teacherPretrain: '',
  rewardPretrain: '',
  teacherKlCoef: distillDefaults.teacherKlCoef,
  taskRewardCoef: distillDefaults.taskRewardCoef,
  lossAggMode: ppoLossDefaults.lossAggMode,
  valueClip: valueLossDefaults.valueClip ?? 0.5,
  normalizeReward: false,
  rewardScale: experienceDefaults.rewardScale,
  rewardBias: experienceDefaults.rewardBias,
  rewardClipRange: [...experienceDefaults.rewardClipRange],
  overlongBufferLen: experienceDefaults.overlongBufferLen,
  overlongPenaltyFactor: experienceDefaults.overlongPenaltyFactor,
  trainMaxTokensPerGpu: undefined,
  gamma: 1,
  lambd: 1,
  entropyLossCoef: 0,
  actorLearningRate: 1e-4,
  criticLearningRate: 5e-4,
  maxNorm: 1,
  lrScheduler: 'cosine_with_min_lr',
  lrWarmupRatio: 0,
  minLrRatio: 0.1,
  l2: 0,
  ...loraFlagDefaults,
  gradientCheckpointing: false,
  packingSamples: false,
  dynamicFiltering: false,
  dynamicFilteringRewardRange: [0, 1],
  seed: 42,
  savePath: '',
  saveDtype: 'float32',
  saveSteps: -1,
  ckptPath: '',
  maxCkptNum: 3,
  saveHfCkpt: false,
  overwrite: false,
  loadCheckpoint: false,
  evalDataset: 'arith:test',
  evalSteps: 5,
  evalPrompts: 500,
  loggingSteps: 1,
  logSamples: 16,
  rolloutNumEngines: 1,
  engine: 'builtin',
  rolloutDtype: 'f32',
  llamacppGpu: undefined,
  engineUrl: undefined,
  engineLaunch: undefined,
  engineWeightsPath: '',
  engineHealthTimeoutMs: 60_000,
  weightSyncTimeoutMs: 600_000,
  actorNumNodes: 1,
  actorNumGpusPerNode: 0,
  refNumGpusPerNode: 0,
  criticNumNodes: 1,
  criticNumGpusPerNode: 0,
  rolloutNumGpusPerEngine: 0,
  colocateAllModels: false,
  actorNumReplicas: 1,
  criticNumReplicas: 1,
  asyncTrain: false,
  asyncQueueSize: 1,
  asyncNumTasks: 128,
  maxHeadOffpolicyness: undefined,
  partialRollout: false,
  useDecoupledLoss: false,
  behavImpWeightCap: ppoLossDefaults.behavImpWeightCap,
  episodeTimeoutMs: 0,
  agentErrorBudget: 0.1,
  toolCallParser: 'hermes',
  gatewayCheckDrift: false,
  gatewayBridge: true,
  agentTurnDiscount: 1,
  remoteRmUrl: undefined,
  remoteRmBatchSize: remoteRewardDefaults.maxBatch,
  remoteRmTimeoutMs: remoteRewardDefaults.timeoutMs,
  remoteRmRetries: remoteRewardDefaults.retries,
  inProcess: false,
};

export { FlagError };

const parser = flagParser('train_ppo', flagTable, trainPpoDefaults, {
  sectionTitles,
  note: 'snake_case spellings are accepted too',
});

/**
 * Parses `argv` (without the program name) and the environment into validated options.
 *
 * @example
 * parseTrainPpoFlags(['--agent-func', './examples/agent.ts', '--n_samples_per_prompt=8'], process.env)
 */
export function parseTrainPpoFlags(
  argv: readonly string[],
  env: Record<string, string | undefined> = {},
): TrainPpoOptions {
  const { options, given } = parser.parse(argv, env);
  validate(options, given);
  return options;
}

function validate(o: TrainPpoOptions, given: Set<keyof TrainPpoOptions>): void {
  const fail = (flag: string, msg: string): never => {
    throw new FlagError(flag, msg);
  };
  if (GROUP_ESTIMATORS.includes(o.advantageEstimator) && o.nSamplesPerPrompt < 2) {
    fail(
      '--advantage-estimator',
      `--advantage-estimator ${o.advantageEstimator} needs a group: set --n-samples-per-prompt > 1 (got ${o.nSamplesPerPrompt})`,
    );
  }
  // LoRA flags: an unknown target module, a bad --load-lora or one contradicted by --lora-rank.
  loraSpecOf(o, o.pretrain, given as Set<string>);
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
  // GSPO's and SAPO's objectives average per sequence (verl); a given --loss-agg-mode is kept.
  if (['gspo', 'sapo'].includes(o.policyLossType) && !given.has('lossAggMode'))
    o.lossAggMode = 'seq-mean-token-mean';
  if (!o.teacherPretrain && (given.has('teacherKlCoef') || given.has('taskRewardCoef'))) {
    fail('--teacher-pretrain', '--teacher-kl-coef and --task-reward-coef need --teacher-pretrain');
  }
  const bad = checkLibraryOptions(o);
  if (bad) fail(bad.flag, bad.message);
  const [lo, hi] = o.dynamicFilteringRewardRange;
  if (lo >= hi)
    fail(
      '--dynamic-filtering-reward-range',
      `--dynamic-filtering-reward-range: low ${lo} must be below high ${hi}`,
    );
  if (o.useKlLoss && o.initKlCoef === 0)
    fail('--use-kl-loss', '--use-kl-loss needs --init-kl-coef > 0');
  if (o.partialRollout && !o.asyncTrain)
    fail('--partial-rollout', '--partial-rollout applies to --async-train only');
  if (o.maxHeadOffpolicyness !== undefined && !o.asyncTrain) {
    fail('--max-head-offpolicyness', '--max-head-offpolicyness applies to --async-train only');
  }
  if (o.useDecoupledLoss && !o.asyncTrain)
    fail('--use-decoupled-loss', '--use-decoupled-loss applies to --async-train only');
  const local = o.engine === 'builtin' || o.engine === 'llamacpp';
  if (!local && !o.engineUrl && !o.engineLaunch)
    fail('--engine-url', `--engine ${o.engine} needs --engine-url or --engine-launch`);
  if (o.engineLaunch !== undefined) {
    if (local) fail('--engine-launch', '--engine-launch needs --engine sglang or --engine vllm');
    if (o.engineUrl !== undefined)
      fail('--engine-launch', '--engine-launch starts the servers: drop --engine-url');
    if (!o.engineLaunch.includes('{port}'))
      fail('--engine-launch', '--engine-launch: the command must listen on {port}');
  }
  checkRolloutDtype(o);
  if (o.llamacppGpu !== undefined && o.engine !== 'llamacpp')
    fail('--llamacpp-gpu', '--llamacpp-gpu applies to --engine llamacpp only');
  if (o.engineUrl !== undefined) {
    if (local) fail('--engine-url', '--engine-url needs --engine sglang or --engine vllm');
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
  if (o.temperature === 0 && o.nSamplesPerPrompt > 1 && given.has('temperature')) {
    fail(
      '--temperature',
      '--temperature 0 makes every sample of a group identical; use > 0 with --n-samples-per-prompt > 1',
    );
  }
  if (o.maxSteps === 0) fail('--max-steps', '--max-steps must be -1 or >= 1');
  if (o.lrWarmupRatio > 1) fail('--lr-warmup-ratio', '--lr-warmup-ratio is a fraction in [0, 1]');
  if (o.lrScheduler === 'constant' && o.lrWarmupRatio > 0 && given.has('lrWarmupRatio'))
    fail(
      '--lr-warmup-ratio',
      '--lr-scheduler constant has no warmup (as in HF transformers): use constant_with_warmup',
    );
  resolveRanks(o, given, 'actor');
  resolveRanks(o, given, 'critic');
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

/** Every flag's effective value in `o` (after defaults resolved), where it came from, and its default. */
export function flagConfig(
  o: TrainPpoOptions,
  argv: readonly string[],
  env: Record<string, string | undefined> = {},
): FlagConfigRow[] {
  // The same parse the run made tells which keys its command line set.
  const { given } = parser.parse(argv, env);
  const show = (v: unknown): string =>
    v === undefined ? '' : Array.isArray(v) ? v.join(' ') : String(v);
  return flagTable.map((f) => ({
    name: parser.flagName(f.key),
    value: f.secret && o[f.key] !== undefined && o[f.key] !== f.bare ? '(hidden)' : show(o[f.key]),
    default: show(trainPpoDefaults[f.key]),
    source: given.has(f.key) ? 'flag' : f.env && env[f.env] ? 'env' : 'default',
    section: f.section ?? 'run',
    help: f.help + (f.env ? ` [env ${f.env}]` : ''),
  }));
}

/** The `--help` text. */
export function trainPpoHelp(): string {
  return parser.help();
}
