/**
 * The parts of one training step that sync and async share: trajectories → experience
 * (reference logprobs, values, rewards, KL, advantages) → critic and policy updates (weights
 * reach the engines through `weight-sync.ts`).
 *
 * @module
 */
import type { GroupResult } from '../../agents/episode-runner.ts';
import type { CriticSample } from '../../roles/critic.ts';
import type { TrainSample, TrainStats } from '../../roles/trainer.ts';
import { dynamicFilter } from '../../algorithms/dynamic-filter.ts';
import { distillAdvantages } from '../../algorithms/distillation.ts';
import { computeReturns, makeExperience } from '../../algorithms/experience.ts';
import { rolloutCorrectionStats } from '../../algorithms/rollout-correction.ts';
import { stalenessStats } from '../../algorithms/staleness.ts';
import type { Trajectory } from '../../algorithms/trajectory.ts';
import type { TrainPpoOptions } from './options.ts';
import {
  advantageOptions,
  distillOptions,
  experienceOptions,
  policyLossOptions,
} from './options.ts';
import type { Roles } from './roles.ts';
import type { UpdateState } from './run-state.ts';

/**
 * The groups that ran to completion, and of those, with `--dynamic-filtering`, the ones whose
 * mean reward lies inside the range (`algorithms/dynamic-filter.ts`).
 */
export function filterGroups(
  groups: GroupResult[],
  o: TrainPpoOptions,
): { kept: GroupResult[]; passRate: number } {
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
export interface UpdateStats extends TrainStats {
  rewardMean: number;
  kl: number;
  klCoef: number;
  valueLoss?: number;
  /** The critic's learning rate at its last optimizer step. */
  criticLr?: number;
  responseLength: number;
  staleMean: number;
  staleMax: number;
  samples: number;
  experienceMs: number;
  trainMs: number;
  /**
   * Train–inference mismatch and what the rollout correction did with it (`logprob_gap`,
   * `is_ratio_*`, `is_*_outside`, `is_rejected_*`), when the trainer's logprobs were computed.
   */
  mismatch?: Record<string, number>;
  /** On-policy distillation: mean log π_student − log π_teacher over action tokens. */
  opdReverseKl?: number;
  /** Mean reward-model score of the batch (`--reward-pretrain`). */
  rmScoreMean?: number;
}

/**
 * Makes experience from `episodes` (their rewards replaced by the reward model's scores with
 * `--reward-pretrain`) and trains the critic and the policy on it. The policy's
 * version before the update is `trainerVersion`; staleness per token is measured against it.
 */
export async function trainOn(
  episodes: Trajectory[],
  roles: Roles,
  o: TrainPpoOptions,
  state: UpdateState,
  trainerVersion: number,
): Promise<UpdateStats> {
  const t0 = performance.now();
  const { kl, rewardNormalizer } = state;
  // A trained reward model's score replaces the agent's reward (`--reward-pretrain`).
  const rmScores = roles.rewardModel
    ? await roles.rewardModel.scores(episodes.map((t) => Array.from(t.inputIds)))
    : undefined;
  const trajectories = rmScores
    ? episodes.map((t, i) => ({ ...t, reward: rmScores[i]! }))
    : episodes;
  const samples = makeExperience(trajectories, experienceOptions(o));
  if (rewardNormalizer) {
    const scores = samples.map((s) => s.score);
    rewardNormalizer.update(scores);
    rewardNormalizer.normalize(scores).forEach((v, i) => (samples[i]!.score = v));
  }
  const seqs = samples.map((s) => Array.from(s.inputIds));
  // The trainer's own logprobs before this update: decoupled PPO's proximal policy, or the
  // "old" policy the IS correction compares with the engine's behaviour logprobs.
  const recompute = o.useDecoupledLoss || o.isCorrection !== 'none';
  const [ref, values, old, teacher] = await Promise.all([
    roles.reference ? roles.reference.logprobs(seqs) : undefined,
    roles.critic ? roles.critic.values(seqs) : undefined,
    recompute ? roles.trainer.logprobs(seqs) : undefined,
    roles.teacher ? roles.teacher.logprobs(seqs) : undefined,
  ]);
  const batch = computeReturns(
    samples,
    { ...(ref ? { refLogprobs: ref } : {}), ...(values ? { values } : {}) },
    {
      advantage: advantageOptions(o),
      klCoef: kl.value,
      klEstimator: o.klEstimator,
      useKlLoss: o.useKlLoss,
      rewardClipRange: o.rewardClipRange,
    },
  );
  // The teacher scores the tokens the student sampled; its reverse KL joins the advantages.
  const opd = teacher
    ? distillAdvantages(
        batch.advantages,
        samples.map((s) => s.actionMask),
        old ?? samples.map((s) => s.behaviourLogprobs),
        teacher,
        distillOptions(o),
      )
    : undefined;
  const trainSamples: TrainSample[] = samples.map((s, i) => ({
    inputIds: s.inputIds,
    actionMask: s.actionMask,
    advantages: (opd ?? batch).advantages[i]!,
    // Without a recompute the engine ran the weights being trained (sync), so its behaviour
    // logprobs are the old policy's.
    oldLogprobs: old ? old[i]! : s.behaviourLogprobs,
    ...(old ? { behaviourLogprobs: s.behaviourLogprobs } : {}),
    ...(ref ? { refLogprobs: ref[i]! } : {}),
  }));
  const t1 = performance.now();
  const criticSamples: CriticSample[] | undefined = values
    ? samples.map((s, i) => ({
        inputIds: s.inputIds,
        actionMask: s.actionMask,
        oldValues: values[i]!,
        returns: batch.returns[i]!,
      }))
    : undefined;
  const [stats, critic] = await Promise.all([
    roles.trainer.train(trainSamples),
    criticSamples && roles.critic ? roles.critic.train(criticSamples) : undefined,
  ]);
  const t2 = performance.now();
  const klCoef = kl.value;
  kl.update(batch.meanKl, samples.length);
  const respLen = samples.reduce((a, s) => a + s.responseLength, 0);
  const stale = stalenessStats(
    samples.map((s) => ({ lossMask: s.actionMask, versions: s.versions })),
    trainerVersion,
  );
  return {
    ...stats,
    ...(old ? { mismatch: rolloutCorrectionStats(samples, old, policyLossOptions(o)) } : {}),
    ...(opd ? { opdReverseKl: opd.reverseKl } : {}),
    ...(rmScores ? { rmScoreMean: rmScores.reduce((a, b) => a + b, 0) / rmScores.length } : {}),
    rewardMean: trajectories.reduce((a, t) => a + t.reward, 0) / Math.max(1, trajectories.length),
    kl: batch.meanKl,
    klCoef,
    ...(critic ? { valueLoss: critic.valueLoss, criticLr: critic.lr } : {}),
    responseLength: respLen / Math.max(1, samples.length),
    staleMean: stale.mean,
    staleMax: stale.max,
    samples: samples.length,
    experienceMs: t1 - t0,
    trainMs: t2 - t1,
  };
}
