/**
 * The parts of one training step that sync and async share, over references: the kept groups'
 * batches (put by the rollouts) go to the reference, the critic and the reward model, whose
 * outputs come back as references too; the trainer and the critic then make the experience
 * themselves (`roles/experience.ts`) and train. The driver holds references, versions and the
 * KL coefficient; it never reads a token (weights reach the engines through `weight-sync.ts`).
 *
 * @module
 */
import { dynamicFilter } from '../../algorithms/dynamic-filter.ts';
import { RewardNormalizer } from '../../algorithms/reward-normalizer.ts';
import type { GroupReport } from '../../roles/episode-report.ts';
import type { ExperienceConfig, StepBatch } from '../../roles/experience.ts';
import { dropHandoff, type Handoff } from '../../roles/handoff.ts';
import type { StepStats } from '../../roles/trainer.ts';
import type { TrainPpoOptions } from './options.ts';
import type { Roles } from './roles.ts';
import type { UpdateState } from './run-state.ts';

/**
 * The groups that ran to completion, and of those, with `--dynamic-filtering`, the ones whose
 * mean reward lies inside the range (`algorithms/dynamic-filter.ts`).
 */
export function filterGroups(
  groups: GroupReport[],
  o: TrainPpoOptions,
): { kept: GroupReport[]; passRate: number } {
  const ok = groups.filter((g) => g.status === 'ok');
  if (!o.dynamicFiltering) return { kept: ok, passRate: 1 };
  const items = ok.flatMap((g, k) =>
    g.trajectories.map((t) => ({ groupId: String(k), reward: t.reward })),
  );
  const res = dynamicFilter(items, { rewardRange: o.dynamicFilteringRewardRange });
  const rejected = new Set(res.rejectedGroups);
  return {
    kept: ok.filter((_, k) => !rejected.has(String(k))),
    passRate: ok.length ? res.passRate : 0,
  };
}

/** What one policy update reports. */
export interface UpdateStats extends Omit<StepStats, 'rewardStats'> {
  /** The KL coefficient the update used (before the controller's update). */
  klCoef: number;
  valueLoss?: number;
  /** The critic's learning rate at its last optimizer step. */
  criticLr?: number;
  trainMs: number;
  /** Mean reward-model score of the batch (`--reward-pretrain`). */
  rmScoreMean?: number;
}

/** Drops the driver's claims on the step's batches once nothing will fetch them again. */
export function releaseBatches(groups: readonly GroupReport[]): void {
  for (const g of groups) if (g.batch) dropHandoff(g.batch);
}

/**
 * Trains the critic and the policy on the kept groups (their rewards replaced by the reward
 * model's scores with `--reward-pretrain`): the roles that score the batch get its references,
 * the trainer and the critic get those and the outputs' references, and each makes the experience.
 */
export async function trainOn(
  kept: readonly GroupReport[],
  roles: Roles,
  config: ExperienceConfig,
  state: UpdateState,
): Promise<UpdateStats> {
  const t0 = performance.now();
  const batches = kept.flatMap((g) => (g.batch ? [g.batch] : []));
  // A trained reward model's score replaces the agent's reward (`--reward-pretrain`).
  const scores = roles.rewardModel ? await roles.rewardModel.scoresOf(batches) : undefined;
  const [reference, values, teacher] = await Promise.all([
    roles.reference?.logprobsOf(batches),
    roles.critic?.valuesOf(batches),
    roles.teacher?.logprobsOf(batches),
  ]);
  const klCoef = state.kl.value;
  const step: StepBatch = {
    batches,
    config,
    klCoef,
    ...(scores ? { scores } : {}),
    ...(state.rewardNormalizer ? { rewardStats: state.rewardNormalizer.state() } : {}),
    ...(reference ? { reference } : {}),
    ...(values ? { values } : {}),
    ...(teacher ? { teacher } : {}),
  };
  const t1 = performance.now();
  const [stats, critic] = await Promise.all([
    roles.trainer.trainStep(step),
    values && roles.critic ? roles.critic.trainStep(step) : undefined,
  ]);
  const t2 = performance.now();
  for (const h of [reference, values, teacher]) if (h) dropHandoff(h as Handoff<unknown>);
  state.kl.update(stats.kl, stats.samples);
  const { rewardStats, ...update } = stats;
  if (rewardStats) state.rewardNormalizer = new RewardNormalizer(rewardStats);
  return {
    ...update,
    klCoef,
    ...(critic ? { valueLoss: critic.valueLoss, criticLr: critic.lr } : {}),
    ...(scores ? { rmScoreMean: scores.reduce((a, b) => a + b, 0) / scores.length } : {}),
    experienceMs: t1 - t0 + stats.experienceMs,
    trainMs: t2 - t1 - stats.experienceMs,
  };
}
