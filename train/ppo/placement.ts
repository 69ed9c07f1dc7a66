/**
 * Where the roles of a run go. Without `--colocate-all-models` each role asks for its own
 * resources (`--actor-num-gpus-per-node` etc.: whole GPUs per node are ranks of one GPU each).
 * With it, every role lands in one placement group (STRICT_PACK: one machine; PACK when a role
 * spans nodes with `--actor-num-nodes`), as in OpenRLHF's hybrid engine: one bundle per rollout engine, each
 * of one GPU (or one CPU on a machine without GPUs), shared by fractions between the roles on it —
 * rollout i on bundle i, the trainer, reference and critic on bundle 0 — so the runtime reserves
 * the GPUs once and the engine sleeps while the trainer uses the same device.
 *
 * @module
 */
import type { ResourceMap } from '../../runtime/protocol.ts';
import type { TrainPpoOptions } from './options.ts';
import type { RoleName } from './errors.ts';
import { policyIsLora } from '../lora-flags.ts';

/**
 * The cores of one colocated bundle: rollout i and every role's rank i take turns on it, so each
 * of their processes computes on this many threads (`roleEnv`).
 */
export const bundleCpus = 1;

/** Resources of one role's actor. */
export interface RolePlacement {
  numCpus: number;
  numGpus: number;
  /** Bundle of the shared placement group; absent when not colocated. */
  bundleIndex?: number;
}

/** The placement of a run. */
export interface RunPlacement {
  /** Bundles of the shared group; empty when not colocated. */
  bundles: ResourceMap[];
  /** STRICT_PACK (one machine), or PACK when a role spans nodes (`--actor-num-nodes` > 1). */
  strategy: 'STRICT_PACK' | 'PACK';
  rollout(i: number): RolePlacement;
  /** Placement of a role's data-parallel `rank` (0 for roles with one rank). */
  role(name: Exclude<RoleName, 'rollout'>, rank?: number): RolePlacement;
}

type PlacementFlags = Pick<
  TrainPpoOptions,
  | 'colocateAllModels'
  | 'rolloutNumEngines'
  | 'rolloutNumGpusPerEngine'
  | 'actorNumNodes'
  | 'actorNumGpusPerNode'
  | 'refNumGpusPerNode'
  | 'criticNumNodes'
  | 'criticNumGpusPerNode'
  | 'initKlCoef'
  | 'advantageEstimator'
  | 'actorNumReplicas'
  | 'criticNumReplicas'
> &
  Partial<Pick<TrainPpoOptions, 'teacherPretrain' | 'rewardPretrain' | 'loraRank' | 'loadLora'>>;

/**
 * Which roles a run has beside its rollouts and trainer ranks, decided once from the flags
 * (`RunConfig.roles`): placement, the in-process roles and the remote ones all read this.
 */
export interface RunRoles {
  /** A frozen reference model: KL (`--init-kl-coef` > 0) on a full policy. */
  reference: boolean;
  /** KL on a LoRA policy: the trainer's base (its adapter off) is the reference. */
  baseAsReference: boolean;
  /** The on-policy distillation teacher (`--teacher-pretrain`). */
  teacher: boolean;
  /** A trained reward model (`--reward-pretrain`). */
  rewardModel: boolean;
  /** Critic ranks: `--critic-num-replicas` with GAE, else 0. */
  critics: number;
}

/** {@link RunRoles} of the flags. */
export function runRoles(
  o: Pick<TrainPpoOptions, 'initKlCoef' | 'advantageEstimator' | 'criticNumReplicas'> &
    Partial<Pick<TrainPpoOptions, 'teacherPretrain' | 'rewardPretrain' | 'loraRank' | 'loadLora'>>,
): RunRoles {
  const kl = o.initKlCoef > 0;
  const lora = policyIsLora(o);
  return {
    reference: kl && !lora,
    baseAsReference: kl && lora,
    teacher: Boolean(o.teacherPretrain),
    rewardModel: Boolean(o.rewardPretrain),
    critics: o.advantageEstimator === 'gae' ? o.criticNumReplicas : 0,
  };
}

/** Decides each role's resources from the flags and the run's roles. */
export function placeRoles(o: PlacementFlags, roles: RunRoles = runRoles(o)): RunPlacement {
  // Whole GPUs per node are ranks of one GPU each (`resolveRanks` in flags.ts counted them).
  const perRank = (g: number): number => (g >= 1 ? 1 : g);
  const own: Record<Exclude<RoleName, 'rollout'>, number> = {
    trainer: perRank(o.actorNumGpusPerNode),
    reference: o.refNumGpusPerNode,
    // The teacher is a frozen model like the reference, and placed like it.
    teacher: o.refNumGpusPerNode,
    reward: o.refNumGpusPerNode,
    critic: perRank(o.criticNumGpusPerNode),
  };
  const critics = roles.critics;
  const strategy =
    o.actorNumNodes > 1 || (critics > 0 && o.criticNumNodes > 1) ? 'PACK' : 'STRICT_PACK';
  if (!o.colocateAllModels) {
    return {
      bundles: [],
      strategy,
      rollout: () => ({ numCpus: 0, numGpus: o.rolloutNumGpusPerEngine }),
      role: (name) => ({ numCpus: 0, numGpus: own[name] }),
    };
  }
  const gpu =
    o.rolloutNumGpusPerEngine > 0 ||
    o.actorNumGpusPerNode > 0 ||
    o.refNumGpusPerNode > 0 ||
    o.criticNumGpusPerNode > 0;
  // As many bundles as the widest role needs: rollout i and every role's rank i share bundle i,
  // so with 2 engines and 2 trainer ranks both devices (cores) work in both phases.
  const n = Math.max(o.rolloutNumEngines, o.actorNumReplicas, critics);
  const bundles = Array.from(
    { length: n },
    (): ResourceMap => (gpu ? { CPU: bundleCpus, GPU: 1 } : { CPU: bundleCpus }),
  );
  const on = (b: number): number =>
    (b < o.rolloutNumEngines ? 1 : 0) +
    (b < o.actorNumReplicas ? 1 : 0) +
    (b === 0 && roles.reference ? 1 : 0) +
    (b === 0 && roles.teacher ? 1 : 0) +
    (b === 0 && roles.rewardModel ? 1 : 0) +
    (b < critics ? 1 : 0);
  // Shares rounded down so they never add up to more than the bundle.
  const share = (k: number): number => Math.floor(10000 / k) / 10000;
  const at = (bundle: number): RolePlacement => {
    const s = share(on(bundle));
    return { numCpus: s, numGpus: gpu ? s : 0, bundleIndex: bundle };
  };
  return { bundles, strategy, rollout: (i) => at(i), role: (_name, rank = 0) => at(rank) };
}
