import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  flagConfig,
  flagTable,
  parseTrainPpoArgs,
  parseTrainPpoFlags,
  trainPpoDefaults,
  trainPpoHelp,
} from '../../train/ppo/flags.ts';
import { llamacppGpu, roleInits, weightSyncBackend } from '../../train/ppo/roles.ts';
import { torchCudaLikely } from '../../model/backends/torch/index.ts';
import { lrScheduleOptions } from '../../train/ppo/options.ts';
import { compileRunConfig } from '../../train/ppo/run-config.ts';

const fails = (argv: string[], re: RegExp, env: Record<string, string> = {}): void => {
  let err: (Error & { flag?: string }) | undefined;
  try {
    parseTrainPpoFlags(argv, env);
  } catch (e) {
    err = e as Error;
  }
  assert.ok(err, `expected ${argv.join(' ')} to fail`);
  assert.match(err!.message, re);
};

test('kebab, snake_case, =value and boolean forms parse to the same options', () => {
  const a = parseTrainPpoFlags([
    '--n-samples-per-prompt',
    '8',
    '--advantage-estimator',
    'rloo',
    '--async-train',
  ]);
  const b = parseTrainPpoFlags([
    '--n_samples_per_prompt=8',
    '--advantage_estimator=rloo',
    '--async_train',
    'true',
  ]);
  assert.equal(a, b);
  assert.is(a.nSamplesPerPrompt, 8);
  assert.is(a.asyncTrain, true);
  const c = parseTrainPpoFlags(['--no-apply-chat-template', '--vllm_num_engines', '2']);
  assert.is(c.applyChatTemplate, false);
  assert.is(c.rolloutNumEngines, 2);
});

test('flagConfig lists every flag with its effective value, its default and where the value came from', () => {
  const argv = ['--n_samples_per_prompt=8', '--no-apply-chat-template', '--eps-clip', '0.3'];
  const env = { ASYNC_NUM_TASKS: '32' };
  const { options, given } = parseTrainPpoArgs(argv, env);
  const rows = flagConfig(options, given, env);
  assert.is(rows.length, flagTable.length);
  const row = (name: string) => rows.find((r) => r.name === name)!;
  assert.equal(row('--n-samples-per-prompt'), {
    ...row('--n-samples-per-prompt'),
    value: '8',
    source: 'flag',
    default: String(trainPpoDefaults.nSamplesPerPrompt),
  });
  assert.equal(
    [row('--apply-chat-template').value, row('--apply-chat-template').source],
    ['false', 'flag'],
  );
  assert.equal([row('--async-num-tasks').value, row('--async-num-tasks').source], ['32', 'env']);
  assert.match(row('--async-num-tasks').help, /\[env ASYNC_NUM_TASKS\]/);
  assert.equal(
    [row('--seed').value, row('--seed').source, row('--seed').default],
    ['42', 'default', '42'],
  );
  assert.is(row('--reward-clip-range').value, trainPpoDefaults.rewardClipRange.join(' '));
});

test('defaults are used when nothing is given', () => {
  assert.equal(parseTrainPpoFlags([]), trainPpoDefaults);
});

test('--gradient-checkpointing and --packing-samples reach the trainer and the critic', () => {
  const o = parseTrainPpoFlags(['--gradient-checkpointing', '--packing_samples']);
  assert.is(o.gradientCheckpointing, true);
  assert.is(o.packingSamples, true);
  assert.is(trainPpoDefaults.gradientCheckpointing, false);
  assert.is(trainPpoDefaults.packingSamples, false);
  const init = roleInits(compileRunConfig(o, 1));
  for (const role of [init.trainer, init.critic]) {
    assert.is(role.gradientCheckpointing, true);
    assert.is(role.packingSamples, true);
  }
});

test('ASYNC_NUM_TASKS and ASYNC_QUEUE_SIZE come from the environment; flags win', () => {
  const o = parseTrainPpoFlags(['--async-train'], { ASYNC_NUM_TASKS: '64', ASYNC_QUEUE_SIZE: '2' });
  assert.is(o.asyncNumTasks, 64);
  assert.is(o.asyncQueueSize, 2);
  const p = parseTrainPpoFlags(['--async-queue-size', '3'], { ASYNC_QUEUE_SIZE: '2' });
  assert.is(p.asyncQueueSize, 3);
});

test('non-integer or out-of-range queue settings are clear errors', () => {
  fails([], /ASYNC_QUEUE_SIZE: expected an integer >= 1, got '1.5'/, { ASYNC_QUEUE_SIZE: '1.5' });
  fails([], /ASYNC_NUM_TASKS: expected an integer >= 1, got '0'/, { ASYNC_NUM_TASKS: '0' });
  fails(['--async-num-tasks', 'many'], /--async-num-tasks: expected an integer, got 'many'/);
});

test('invalid combinations name the flag', () => {
  fails(
    ['--advantage-estimator', 'group_norm', '--n-samples-per-prompt', '1'],
    /--advantage-estimator group_norm needs a group: set --n-samples-per-prompt > 1/,
  );
  fails(
    ['--advantage-estimator', 'ppo'],
    /--advantage-estimator: 'ppo' is not one of gae, reinforce/,
  );
  fails(['--dual-clip', '0.5'], /--dual-clip: must be > 1/);
  fails(
    ['--is-correction', 'tis', '--async-train', '--use-decoupled-loss'],
    /--is-correction: cannot be combined with --use-decoupled-loss/,
  );
  fails(
    ['--overlong-buffer-len', '64'],
    /--overlong-buffer-len: needs --generate-max-len greater than the buffer/,
  );
  fails(['--is-threshold', '2 1'], /--is-threshold: needs 0 < low <= high/);
  fails(['--loss-agg-mode', 'sum'], /--loss-agg-mode: 'sum' is not one of token-mean/);
  fails(['--partial-rollout'], /--partial-rollout applies to --async-train only/);
  fails(['--train-batch-size', '1000'], /--train-batch-size 1000 exceeds the 64 samples/);
  fails(['--use-kl-loss'], /--use-kl-loss needs --init-kl-coef > 0/);
  fails(['--engine', 'sglang'], /--engine sglang needs --engine-url/);
  fails(['--llamacpp-gpu', 'auto'], /--llamacpp-gpu applies to --engine llamacpp only/);
  fails(
    ['--vllm_sync_backend', 'gloo'],
    /--vllm_sync_backend gloo applies to --engine sglang or --engine vllm only/,
  );
  fails(
    ['--engine', 'sglang', '--engine-url', 'http://127.0.0.1:1', '--vllm-sync-backend', 'mpi'],
    /--vllm-sync-backend: 'mpi' is not one of/,
  );
  fails(
    ['--engine', 'llamacpp', '--llamacpp-gpu', 'metal'],
    /--llamacpp-gpu: 'metal' is not one of/,
  );
  fails(
    ['--rollout-batch-sise', '3'],
    /unknown flag --rollout-batch-sise \(did you mean --rollout-batch-size\?\)/,
  );
  fails(['--seed'], /--seed needs a value/);
});

test("--engine llamacpp's device: the CPU build, a GPU build when the rollouts get GPUs, or as asked", () => {
  const gpu = (...argv: string[]) =>
    llamacppGpu(parseTrainPpoFlags(['--engine', 'llamacpp', ...argv]));
  assert.is(gpu(), false);
  assert.is(gpu('--rollout-num-gpus-per-engine', '1'), 'auto');
  assert.is(gpu('--rollout-num-gpus-per-engine', '1', '--llamacpp-gpu', 'cuda'), 'cuda');
  assert.is(gpu('--rollout-num-gpus-per-engine', '1', '--llamacpp-gpu', 'off'), false);
  assert.is(gpu('--llamacpp-gpu', 'vulkan'), 'vulkan');
});

test('--vllm-sync-backend: as asked; else disk without CUDA and for in-process engines', () => {
  const sync = (...argv: string[]) => weightSyncBackend(parseTrainPpoFlags(argv));
  const sglang = ['--engine', 'sglang', '--engine-url', 'http://127.0.0.1:1'];
  assert.is(sync(...sglang, '--vllm_sync_backend', 'gloo'), 'gloo');
  assert.is(sync(...sglang, '--vllm-sync-backend', 'nccl'), 'nccl');
  assert.is(sync(), 'disk');
  assert.is(sync(...sglang), torchCudaLikely() ? 'nccl' : 'disk');
});

test('--help lists every flag with its default', () => {
  const h = trainPpoHelp();
  assert.match(h, /--agent-func/);
  assert.match(h, /--async-queue-size\s+.*\(default 1\) \[env ASYNC_QUEUE_SIZE\]/);
});

test('--help prints the flags in sections', () => {
  const h = trainPpoHelp();
  assert.match(h, /\nAlgorithm \(formulas: algorithms\/README.md\):\n {2}--advantage-estimator/);
  assert.match(h, /--loss-agg-mode\s+how token losses are averaged \(default token-mean\)/);
});

test('the run config carries what the parse resolved, and the roles take it as it is', () => {
  const argv = ['--advantage-estimator', 'gae', '--lora-rank', '4', '--eps-clip', '0.3'];
  const args = parseTrainPpoArgs(argv);
  const c = compileRunConfig({ ...args.options, pretrain: '/models/base' }, 7, args);
  // The parse's objects, not resolved again: the same loss, KL and experience options.
  assert.is(c.loss, args.library.loss);
  assert.is(c.kl, args.library.kl);
  assert.is(c.experience, args.library.experience);
  assert.is(c.loss.epsClipHigh, 0.3, 'resolved: the upper clip defaults to --eps-clip');
  const init = roleInits(c);
  assert.is(init.trainer.loss, c.loss);
  assert.is(init.trainer.lrSchedule, c.lrSchedule);
  assert.equal(c.lrSchedule, lrScheduleOptions(c.flags, 7), 'over the run of 7 steps');
  // The LoRA spec names the base the driver resolved; the critic trains its own adapter.
  assert.is(init.trainer.lora?.config.baseModel, '/models/base');
  assert.is(init.critic.lora?.config.r, 4);
  // A library setting out of range fails the parse, naming its flag.
  fails(['--eps-clip', '1.5'], /--eps-clip/);
});

test('--num-episodes sets the run length from the data unless --max-steps is given (H6)', () => {
  assert.is(parseTrainPpoFlags([]).maxSteps, 30);
  assert.is(parseTrainPpoFlags(['--num_episodes', '2']).maxSteps, -1);
  assert.is(parseTrainPpoFlags(['--max-steps', '-1', '--num-episodes', '2']).maxSteps, -1);
  assert.is(parseTrainPpoFlags(['--max-steps', '5']).maxSteps, 5);
  fails(
    ['--max-steps', '5', '--num_episodes', '2'],
    /^--max-steps 5 and --num_episodes 2 both set the run length: give one/,
  );
});

test("OpenRLHF v0.11's dotted names read as the flat ones, and errors quote them (H7)", () => {
  const o = parseTrainPpoFlags([
    '--actor.model_name_or_path',
    'rtjob-tiny-math',
    '--data.prompt_dataset',
    'prompts.jsonl',
    '--algo.advantage.estimator',
    'group_norm',
    '--actor.adam.lr',
    '5e-7',
    '--train.async_enable',
    '--algo.advantage.no_std_norm',
  ]);
  assert.is(o.pretrain, 'rtjob-tiny-math');
  assert.is(o.promptData, 'prompts.jsonl');
  assert.is(o.advantageEstimator, 'group_norm');
  assert.is(o.actorLearningRate, 5e-7);
  assert.is(o.asyncTrain, true);
  assert.is(o.advantageStdNorm, false);
  fails(['--actor.adam.lr', 'abc'], /^--actor\.adam\.lr: expected a number, got 'abc'$/);
  fails(
    ['--algo.advantage.estimator', 'group_norm', '--rollout.n_samples_per_prompt', '1'],
    /^--algo\.advantage\.estimator group_norm needs a group: set --rollout\.n_samples_per_prompt > 1/,
  );
  // A dotted name rtjob does not take keeps its flat name's note; an unknown one is quoted as typed.
  fails(
    ['--ds.ring_attn_size', '2', '--actor.foo'],
    /^2 unknown flags:\n {2}--ds\.ring_attn_size: not applicable: no sequence parallelism.*\n {2}--actor\.foo: no such flag/,
  );
});

test('near-miss flags point to the rtjob spelling, with their values (H12)', () => {
  fails(['--use_icepop'], /^unknown flag --use_icepop: --is-correction icepop: /);
  fails(['--enable_vllm_is_correction'], /--is-correction tis/);
  // Both values of the pair are the flag's, not a stray positional.
  fails(
    ['--eps_clip_low_high', '0.2', '0.28'],
    /^unknown flag --eps_clip_low_high: --eps-clip 0\.2 --eps-clip-high 0\.28/,
  );
  fails(['--use_dynamic_batch'], /--train-max-tokens-per-gpu N alone turns it on/);
  for (const f of ['--input_template', '--eval_temperature', '--eval_n_samples_per_prompt'])
    fails([f, 'x'], new RegExp(`^unknown flag ${f}: (?!no such flag)`));
  assert.equal(
    parseTrainPpoFlags(['--vllm_is_truncated_threshold', '0.5', '5']).isThreshold,
    [0.5, 5],
  );
});

test('the built-in held-out set goes with the built-in data only, as OpenRLHF evaluates nothing unasked (H8)', () => {
  assert.is(parseTrainPpoFlags([]).evalDataset, 'arith:test');
  assert.is(parseTrainPpoFlags(['--prompt-data', 'arith']).evalDataset, 'arith:test');
  assert.is(parseTrainPpoFlags(['--prompt_data', 'prompts.jsonl']).evalDataset, '');
  assert.is(parseTrainPpoFlags(['--prompt_data', 'org/name']).evalDataset, '');
  const asked = ['--prompt_data', 'prompts.jsonl', '--eval_dataset', 'held.jsonl'];
  assert.is(parseTrainPpoFlags(asked).evalDataset, 'held.jsonl');
});

test.run();
