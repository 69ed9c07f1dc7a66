/**
 * The RL roles as the training loops see them: every method returns a promise, whether the role
 * is a plain object in the driver (`--in-process`, tests) or an actor placed through the runtime.
 *
 * @module
 */
import { Critic } from '../../roles/critic.ts';
import { Reference } from '../../roles/reference.ts';
import { RewardModel } from '../../roles/reward-model.ts';
import { Rollout } from '../../roles/rollout.ts';
import { Trainer } from '../../roles/trainer.ts';
import { join, resolve } from 'node:path';
import { get, ObjectRef } from '../../runtime/api.ts';
import { readEnv } from '../../runtime/env.ts';
import type { RefOr } from '../../runtime/handles.ts';
import type { RolloutLora } from '../../roles/rollout-engine.ts';
import type { LoraSpec } from '../../model/lora-spec.ts';
import type { ZeroStage } from '../../model/zero-optimizer.ts';
import type { TrainPpoOptions } from './options.ts';
import type { RunConfig } from './run-config.ts';
import type { PolicyWeights } from '../../engines/types.ts';
import { engineSpec, runsInProcess } from '../../engines/registry.ts';
import { torchCudaLikely } from '../../model/backends/torch/index.ts';

/** A version of the policy as the engines take it: a ref the trainer owns, or (in-process) the value. */
export interface PolicyUpdate {
  version: number;
  weights: PolicyWeights | ObjectRef<PolicyWeights>;
}

/**
 * `T` with every method returning a promise; each argument may also be a ref to its value, which
 * is resolved before the method runs (where the role runs, for actors).
 */
export type Remote<T> = {
  [K in keyof T as T[K] extends (...a: never[]) => unknown ? K : never]: T[K] extends (
    ...a: infer A
  ) => infer R
    ? (...a: { [I in keyof A]: RefOr<A[I]> }) => Promise<Awaited<R>>
    : never;
};

/** The roles of one run. */
export interface Roles {
  rollouts: Remote<Rollout>[];
  trainer: Remote<Trainer>;
  /** The reference policy's logprobs: a reference role, or a LoRA policy's base ({@link baseAsReference}). */
  reference?: Pick<Remote<Reference>, 'logprobsOf'>;
  /** On-policy distillation's teacher: a frozen model, served by the Reference role's class. */
  teacher?: Remote<Reference>;
  /** A trained reward model that scores the episodes (`--reward-pretrain`). */
  rewardModel?: Remote<RewardModel>;
  critic?: Remote<Critic>;
  /** The trainer's current weights as the engines take them (`weight-sync.ts`). */
  policy(): Promise<PolicyUpdate>;
  /**
   * The node each role runs on (remote roles), so weights cross to each node once; absent
   * in-process (one process, one node).
   */
  nodes?: { trainer: string | undefined; rollouts: (string | undefined)[] };
  /**
   * Waits for a dead rollout's restart (remote roles only) and loads its engine; the caller then
   * gives it the current weights.
   */
  restartRollout?: (i: number) => Promise<void>;
  /**
   * The rollouts the runtime restarted since they were last made ready (remote roles only): a
   * death between calls, which no call saw, so the run still counts and logs it.
   */
  restartedRollouts?: () => Promise<number[]>;
  /** What each role computes on, from its `ready()`: see {@link roleBackends}. */
  backends?: string;
  /** Kills rollout `i`'s process so that the runtime restarts it (remote roles only). */
  killRollout?: (i: number) => Promise<void>;
  close(): Promise<void>;
}

/**
 * Each role's backend, device and precision, as their `ready()` report them, for the run's first
 * lines: `trainer torch (libtorch 1.13.1, cpu, fp32); rollout-0 builtin engine on torch (…)`.
 */
export function roleBackends(
  engine: string,
  ready: {
    rollouts: { backend: string }[];
    trainer: { backend: string };
    reference?: { backend: string } | undefined;
    critic?: { backend: string } | undefined;
  },
): string {
  const parts = [`trainer ${ready.trainer.backend}`];
  if (ready.reference) parts.push(`reference ${ready.reference.backend}`);
  if (ready.critic) parts.push(`critic ${ready.critic.backend}`);
  ready.rollouts.forEach((r, i) =>
    parts.push(`rollout-${i} ${engine} engine${r.backend ? ` on ${r.backend}` : ''}`),
  );
  return parts.join('; ');
}

/** Wraps a plain object so each method call returns a promise. */
export function local<T extends object>(obj: T): Remote<T> {
  return new Proxy(obj, {
    get(target, prop) {
      const v = (target as Record<string | symbol, unknown>)[prop];
      if (typeof v !== 'function') return undefined;
      return async (...args: unknown[]) => {
        // Top-level refs are resolved before the call, as the runtime does for an actor.
        const resolved = await Promise.all(args.map((a) => (a instanceof ObjectRef ? get(a) : a)));
        return (v as (...a: unknown[]) => unknown).apply(target, resolved);
      };
    },
  }) as unknown as Remote<T>;
}

/**
 * N data-parallel ranks of one role seen as one: the methods the role's class declares in its
 * `static everyRank` run on every rank at once (they meet in collectives, or must change every
 * rank's state) and answer with rank 0's result; the rest (weights, checkpoints, logprobs) run
 * on rank 0 alone, whose state every rank shares.
 *
 * @example
 * const trainer = replicated(trainerRanks, Trainer);
 */
export function replicated<T>(
  ranks: Remote<T>[],
  role: { readonly prototype: T; readonly everyRank: readonly (keyof Remote<T>)[] },
): Remote<T> {
  if (ranks.length === 1) return ranks[0]!;
  const all: readonly (keyof Remote<T>)[] = role.everyRank;
  const call = (rank: Remote<T>, prop: keyof Remote<T>, args: unknown[]): Promise<unknown> =>
    (rank[prop] as (...a: unknown[]) => Promise<unknown>)(...args);
  return new Proxy({} as Remote<T>, {
    get: (_t, prop) => {
      if (typeof prop !== 'string' || prop === 'then') return undefined;
      const key = prop as keyof Remote<T>;
      return all.includes(key)
        ? async (...args: unknown[]) => (await Promise.all(ranks.map((r) => call(r, key, args))))[0]
        : (...args: unknown[]) => call(ranks[0]!, key, args);
    },
  });
}

/** The llama.cpp engine's GPU build: as asked, else `auto` when the rollouts are given GPUs. */
export function llamacppGpu(o: TrainPpoOptions): 'auto' | 'cuda' | 'vulkan' | false {
  const asked = o.llamacppGpu ?? (o.rolloutNumGpusPerEngine > 0 ? 'auto' : 'off');
  return asked === 'off' ? false : asked;
}

/** How full weights reach the servers: `--vllm-sync-backend`, else NCCL where libtorch has CUDA. */
export function weightSyncBackend(o: TrainPpoOptions): 'disk' | 'gloo' | 'nccl' {
  if (o.vllmSyncBackend !== undefined) return o.vllmSyncBackend;
  return engineSpec(o.engine).weightBroadcast && torchCudaLikely() ? 'nccl' : 'disk';
}

/** The engines as the run's first line names them: `llamacpp q8_0`, `sglang (weights by gloo)`. */
export function engineLabel(o: TrainPpoOptions): string {
  const spec = engineSpec(o.engine);
  if (spec.gguf) return `${o.engine} ${o.rolloutDtype}`;
  return spec.weightBroadcast ? `${o.engine} (weights by ${weightSyncBackend(o)})` : o.engine;
}

/** Constructor arguments of each role: the flags it reads and the resolved options it takes. */
export function roleInits(c: RunConfig) {
  const { flags: o, lora } = c;
  const servers = lora && serverLora(o, lora);
  return {
    rollout: (i: number) => ({
      pretrain: o.pretrain,
      ...(engineSpec(o.engine).gguf
        ? { engine: o.engine, rolloutDtype: o.rolloutDtype, llamacppGpu: llamacppGpu(o) }
        : {}),
      ...(!runsInProcess(o.engine)
        ? {
            engine: o.engine,
            // Each rollout owns a share of the servers, so a weight update reaches each server once;
            // or starts its own.
            ...(o.engineLaunch !== undefined
              ? { engineLaunch: o.engineLaunch }
              : { engineUrls: [...c.engineShares[i]!] }),
            weightsDir: resolve(
              o.engineWeightsPath || join(o.ckptPath, 'engine_weights'),
              `rollout_${i}`,
            ),
            ...(servers ? { lora: servers } : {}),
            weightSyncBackend: weightSyncBackend(o),
          }
        : {}),
      ...(o.agentFunc ? { agentFunc: o.agentFunc } : {}),
      ...(o.remoteRmUrl !== undefined
        ? {
            remoteReward: {
              urls: [...c.remoteRmUrls],
              maxBatch: o.remoteRmBatchSize,
              timeoutMs: o.remoteRmTimeoutMs,
              retries: o.remoteRmRetries,
              // `rtjob serve --reward-model` wants its key; OpenRLHF's serve_rm takes none.
              ...(readEnv('RTJOB_REMOTE_RM_API_KEY') !== undefined
                ? { apiKey: readEnv('RTJOB_REMOTE_RM_API_KEY')! }
                : {}),
            },
          }
        : {}),
      weightSyncTimeoutMs: o.weightSyncTimeoutMs,
      temperature: o.temperature,
      topP: o.topP,
      generateMaxLen: o.generateMaxLen,
      promptMaxLen: o.promptMaxLen,
      applyChatTemplate: o.applyChatTemplate,
      nSamplesPerPrompt: o.nSamplesPerPrompt,
      asyncNumTasks: o.asyncNumTasks,
      episodeTimeoutMs: o.episodeTimeoutMs,
      seed: o.seed * 7 + i,
      toolCallParser: o.toolCallParser,
      gatewayCheckDrift: o.gatewayCheckDrift,
      gatewayBridge: o.gatewayBridge,
      agentTurnDiscount: o.agentTurnDiscount,
    }),
    trainer: {
      pretrain: o.pretrain,
      saveDtype: o.saveDtype,
      learningRate: o.actorLearningRate,
      maxNorm: o.maxNorm,
      trainBatchSize: o.trainBatchSize,
      microTrainBatchSize: o.microTrainBatchSize,
      maxEpochs: o.maxEpochs,
      temperature: o.temperature,
      lrSchedule: c.lrSchedule,
      weightDecay: o.l2,
      seed: o.seed,
      loss: c.loss,
      ...(lora ? { lora } : {}),
      gradientCheckpointing: o.gradientCheckpointing,
      packingSamples: o.packingSamples,
      zeroStage: o.zeroStage as ZeroStage,
      ...(o.trainMaxTokensPerGpu !== undefined
        ? { trainMaxTokensPerGpu: o.trainMaxTokensPerGpu }
        : {}),
    },
    reference: { pretrain: o.pretrain, temperature: o.temperature },
    teacher: { pretrain: o.teacherPretrain, temperature: o.temperature },
    rewardModel: { pretrain: o.rewardPretrain },
    critic: {
      pretrain: o.pretrain,
      learningRate: o.criticLearningRate,
      trainBatchSize: o.trainBatchSize,
      microTrainBatchSize: o.microTrainBatchSize,
      maxEpochs: o.maxEpochs,
      maxNorm: o.maxNorm,
      lrSchedule: c.lrSchedule,
      weightDecay: o.l2,
      gradientCheckpointing: o.gradientCheckpointing,
      packingSamples: o.packingSamples,
      zeroStage: o.zeroStage as ZeroStage,
      ...c.value,
      // The critic's adapter is its own: the policy's rank and targets, freshly initialised.
      ...(lora ? { lora: { config: lora.config, seed: o.seed + 1 } } : {}),
    },
  };
}

/** The reference of a LoRA policy: the trainer's model with the adapter left out. */
export function baseAsReference(trainer: Remote<Trainer>): NonNullable<Roles['reference']> {
  return { logprobsOf: (batches) => trainer.referenceLogprobsOf(batches) };
}

/**
 * What SGLang / vLLM servers need for a LoRA policy: its rank and modules, and adapter slots for
 * the most versions in flight at once (the run's staleness bound: 0 in sync runs, the queue or
 * `--max-head-offpolicyness` in async ones) + 2, since a new adapter loads before the oldest goes.
 */
function serverLora(o: TrainPpoOptions, spec: LoraSpec): RolloutLora {
  const staleness = o.asyncTrain ? (o.maxHeadOffpolicyness ?? o.asyncQueueSize) : 0;
  return { rank: spec.config.r, targetModules: spec.config.targetModules, slots: staleness + 2 };
}

/** Every role as a plain object in this process. */
export async function inProcessRoles(c: RunConfig): Promise<Roles> {
  const { flags: o } = c;
  const init = roleInits(c);
  const rollouts = Array.from(
    { length: o.rolloutNumEngines },
    (_, i) => new Rollout(init.rollout(i)),
  );
  const trainer = new Trainer(init.trainer);
  const { roles } = c;
  const reference = roles.reference ? new Reference(init.reference) : undefined;
  const teacher = roles.teacher ? new Reference(init.teacher) : undefined;
  const rewardModel = roles.rewardModel ? new RewardModel(init.rewardModel) : undefined;
  const critic = roles.critics > 0 ? new Critic(init.critic) : undefined;
  const [ready, trainerReady, referenceReady, criticReady] = await Promise.all([
    Promise.all(rollouts.map((r) => r.ready())),
    trainer.ready(),
    reference?.ready(),
    critic?.ready(),
    teacher?.ready(),
    rewardModel?.ready(),
  ]);
  return {
    backends: roleBackends(o.engine, {
      rollouts: ready,
      trainer: trainerReady,
      reference: referenceReady,
      critic: criticReady,
    }),
    rollouts: rollouts.map(local),
    trainer: local(trainer),
    ...(reference ? { reference: local(reference) } : {}),
    ...(teacher ? { teacher: local(teacher) } : {}),
    ...(rewardModel ? { rewardModel: local(rewardModel) } : {}),
    ...(roles.baseAsReference ? { reference: baseAsReference(local(trainer)) } : {}),
    ...(critic ? { critic: local(critic) } : {}),
    policy: async () => {
      const w = await trainer.weights();
      return { version: w.version, weights: w };
    },
    close: async () => {
      await Promise.all(rollouts.map((r) => r.close()));
      trainer.dispose();
      reference?.dispose();
      teacher?.dispose();
      rewardModel?.dispose();
      critic?.dispose();
    },
  };
}
