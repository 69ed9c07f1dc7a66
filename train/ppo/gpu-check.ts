/**
 * The GPUs a run's placement asks for, by the flag that asks, checked against the GPUs the
 * cluster's nodes offer before any role starts: `--vllm_tensor_parallel_size 1` (OpenRLHF's
 * default) on a machine without GPUs fails naming the flag, not with the runtime's
 * `InfeasibleError … {CPU: 2, memory: …}` once the roles are placed. Pure: the caller gives the
 * nodes' GPU counts (the driver from the head, `rtjob submit` for the private cluster it starts).
 *
 * @module
 */
import type { TrainPpoOptions } from './options.ts';

type GpuFlags = Pick<
  TrainPpoOptions,
  | 'rolloutNumEngines'
  | 'rolloutNumGpusPerEngine'
  | 'actorNumReplicas'
  | 'actorNumGpusPerNode'
  | 'refNumGpusPerNode'
  | 'criticNumReplicas'
  | 'criticNumGpusPerNode'
  | 'advantageEstimator'
  | 'initKlCoef'
  | 'colocateAllModels'
>;

/** One flag's request: `count` actors of `each` GPUs. */
export interface GpuRequest {
  /** The flag's name (`--actor-num-gpus-per-node`). */
  flag: string;
  /** The flag as a message names it, with OpenRLHF's other name where it has one. */
  shown: string;
  /** How the request reads (`1 GPU per engine`). */
  what: string;
  each: number;
  count: number;
}

/** What each GPU flag of `o` asks for (flags at 0 ask nothing). */
export function gpuRequests(o: GpuFlags): GpuRequest[] {
  const perRank = (g: number): number => (g >= 1 ? 1 : g);
  const rows: GpuRequest[] = [
    {
      flag: '--rollout-num-gpus-per-engine',
      shown: '--rollout-num-gpus-per-engine (--vllm_tensor_parallel_size)',
      what: 'per engine',
      each: o.rolloutNumGpusPerEngine,
      count: o.rolloutNumEngines,
    },
    {
      flag: '--actor-num-gpus-per-node',
      shown: '--actor-num-gpus-per-node',
      what: 'per trainer rank',
      each: perRank(o.actorNumGpusPerNode),
      count: o.actorNumReplicas,
    },
    {
      flag: '--ref-num-gpus-per-node',
      shown: '--ref-num-gpus-per-node',
      what: 'for the reference model',
      each: o.refNumGpusPerNode,
      count: o.initKlCoef > 0 ? 1 : 0,
    },
    {
      flag: '--critic-num-gpus-per-node',
      shown: '--critic-num-gpus-per-node',
      what: 'per critic rank',
      each: perRank(o.criticNumGpusPerNode),
      count: o.advantageEstimator === 'gae' ? o.criticNumReplicas : 0,
    },
  ];
  return rows.filter((r) => r.each > 0 && r.count > 0);
}

const gpus = (n: number): string => `${n} GPU${n === 1 ? '' : 's'}`;

/**
 * Why the cluster whose nodes offer `nodeGpus` cannot hold the GPUs `o` asks for, naming the
 * first flag that asks, or undefined: no GPUs at all, one actor's GPUs on no single node, or more
 * in all than the cluster has (`--colocate-all-models` shares one GPU per bundle: checked on its
 * first request alone).
 */
export function gpuProblem(
  o: GpuFlags,
  nodeGpus: readonly number[],
): { flag: string; message: string } | undefined {
  const asks = gpuRequests(o);
  if (asks.length === 0) return undefined;
  const total = nodeGpus.reduce((a, b) => a + b, 0);
  const largest = Math.max(0, ...nodeGpus);
  const first = asks[0]!;
  const have = `the cluster has ${total === 0 ? 'no GPUs' : gpus(total)}`;
  if (total === 0)
    return {
      flag: first.flag,
      message: `${first.shown} ${first.each} asks ${gpus(first.each)} ${first.what}; ${have} (0 runs it on CPUs; a node offers GPUs with rtjob start --num-gpus N)`,
    };
  const big = asks.find((r) => r.each > largest);
  if (big)
    return {
      flag: big.flag,
      message: `${big.shown} ${big.each} asks ${gpus(big.each)} ${big.what}; no node has more than ${gpus(largest)}`,
    };
  const need = o.colocateAllModels
    ? Math.max(...asks.map((r) => Math.ceil(r.count)))
    : asks.reduce((a, r) => a + r.each * r.count, 0);
  if (need > total)
    return {
      flag: first.flag,
      message: `the run asks ${gpus(need)} (${asks.map((r) => `${r.shown} ${r.each} × ${r.count}`).join(', ')}); ${have}`,
    };
  return undefined;
}
