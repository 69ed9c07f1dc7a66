/**
 * The GPUs a train_ppo placement asks for, checked against the cluster before any role starts
 * (H10): OpenRLHF's `--vllm_tensor_parallel_size 1` on a CPU box names the flag.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { gpuProblem } from '../../train/ppo/gpu-check.ts';

const problem = (argv: string[], nodeGpus: number[]) =>
  gpuProblem(parseTrainPpoFlags(argv), nodeGpus);

test('a GPU request on a cluster without GPUs names the flag that asked', () => {
  assert.equal(problem(['--vllm_tensor_parallel_size', '1'], [0]), {
    flag: '--rollout-num-gpus-per-engine',
    message:
      '--rollout-num-gpus-per-engine (--vllm_tensor_parallel_size) 1 asks 1 GPU per engine; the cluster has no GPUs (0 runs it on CPUs; a node offers GPUs with rtjob start --num-gpus N)',
  });
  assert.match(
    problem(['--actor_num_gpus_per_node', '1'], [0, 0])!.message,
    /^--actor-num-gpus-per-node 1 asks 1 GPU per trainer rank; the cluster has no GPUs/,
  );
});

test('GPUs on no single node, or more than the cluster has in all', () => {
  assert.match(
    problem(['--vllm_tensor_parallel_size', '4'], [2, 2])!.message,
    /asks 4 GPUs per engine; no node has more than 2 GPUs$/,
  );
  assert.match(
    problem(
      [
        '--vllm_num_engines',
        '2',
        '--vllm_tensor_parallel_size',
        '1',
        '--actor_num_gpus_per_node',
        '2',
      ],
      [2],
    )!.message,
    /^the run asks 4 GPUs \(.*× 2, --actor-num-gpus-per-node 1 × 2\); the cluster has 2 GPUs$/,
  );
});

test('a run on CPUs, or GPUs that fit, passes', () => {
  assert.is(problem([], [0]), undefined);
  assert.is(
    problem(['--vllm_tensor_parallel_size', '1', '--actor_num_gpus_per_node', '1'], [2]),
    undefined,
  );
  // Colocated roles share one GPU per bundle.
  const colocated = [
    '--colocate_all_models',
    '--vllm_tensor_parallel_size',
    '1',
    '--actor_num_gpus_per_node',
    '1',
  ];
  assert.is(problem(colocated, [1]), undefined);
});

test.run();
