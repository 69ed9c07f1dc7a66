/**
 * The parts of one training step that sync and async share: trajectories → experience
 * (reference logprobs, values, rewards, KL, advantages) → critic and policy updates → weights to
 * every engine.
 *
 * @module
 */
import type { GroupResult } from '../../actors/agent/episode-runner.ts';
import type { CriticSample } from '../../actors/critic.ts';
import type { TrainSample, TrainStats } from '../../actors/trainer.ts';
import { computeReturns, makeExperience } from '../experience.ts';
import type { KlController } from '../kl.ts';
import type { Trajectory } from '../trajectory.ts';
import type { TrainPpoOptions } from './flags.ts';
import type { Roles } from './roles.ts';

/** Keeps groups whose mean reward lies strictly inside the range (`--dynamic-filtering`). */
export function filterGroups(groups: GroupResult[], o: TrainPpoOptions): { kept: GroupResult[]; passRate: number } {
  const ok = groups.filter((g) => g.status === 'ok');
  if (!o.dynamicFiltering) return { kept: ok, passRate: 1 };
  const [lo, hi] = o.dynamicFilteringRewardRange;
  const kept = ok.filter((g) => {
    const mean = g.trajectories.reduce((s, t) => s + t.reward, 0) / g.trajectories.length;
    return mean > lo && mean < hi;
  });
  return { kept, passRate: ok.length ? kept.length / ok.length : 0 };
}

/** What one policy update reports. */
export interface UpdateStats extends TrainStats {
  rewardMean: number;
  kl: number;
  klCoef: number;
  valueLoss?: number;
  responseLength: number;
  staleMean: number;
  staleMax: number;
  samples: number;
  experienceMs: number;
  trainMs: number;
}

/**
 * Makes experience from `trajectories` and trains the critic and the policy on it. The policy's
 * version before the update is `trainerVersion`; staleness per token is measured against it.
 */
export async function trainOn(
  trajectories: Trajectory[],
  roles: Roles,
  o: TrainPpoOptions,
  kl: KlController,
  trainerVersion: number,
): Promise<UpdateStats> {
  const t0 = performance.now();
  const samples = makeExperience(trajectories, { maxNewTokens: o.generateMaxLen });
  const seqs = samples.map((s) => Array.from(s.inputIds));
  const [ref, values, prox] = await Promise.all([
    roles.reference ? roles.reference.logprobs(seqs) : undefined,
    roles.critic ? roles.critic.values(seqs) : undefined,
    // Decoupled PPO needs the proximal policy: the trainer's weights before this update.
    o.useDecoupledLoss ? roles.trainer.logprobs(seqs) : undefined,
  ]);
  const batch = computeReturns(
    samples,
    { ...(ref ? { refLogprobs: ref } : {}), ...(values ? { values } : {}) },
    {
      advantage: {
        estimator: o.advantageEstimator,
        gamma: o.gamma,
        lambd: o.lambd,
        noStdNorm: o.noAdvantageStdNorm,
        nSamplesPerPrompt: o.nSamplesPerPrompt,
      },
      klCoef: kl.value,
      klEstimator: o.klEstimator,
      useKlLoss: o.useKlLoss,
    },
  );
  const trainSamples: TrainSample[] = samples.map((s, i) => ({
    inputIds: s.inputIds,
    actionMask: s.actionMask,
    advantages: batch.advantages[i]!,
    // Behaviour logprobs: in sync mode the engine ran the current weights, so they are the old
    // policy's; in async mode the decoupled loss uses them as the behaviour term.
    oldLogprobs: s.behaviourLogprobs,
    ...(prox ? { proxLogprobs: prox[i]! } : {}),
    ...(ref ? { refLogprobs: ref[i]! } : {}),
  }));
  const t1 = performance.now();
  const criticSamples: CriticSample[] | undefined = values
    ? samples.map((s, i) => ({ inputIds: s.inputIds, actionMask: s.actionMask, oldValues: values[i]!, returns: batch.returns[i]! }))
    : undefined;
  const [stats, critic] = await Promise.all([
    roles.trainer.train(trainSamples),
    criticSamples && roles.critic ? roles.critic.train(criticSamples) : undefined,
  ]);
  const t2 = performance.now();
  const klCoef = kl.value;
  kl.update(batch.meanKl, samples.length);
  let staleSum = 0;
  let staleN = 0;
  let staleMax = 0;
  let respLen = 0;
  for (const s of samples) {
    respLen += s.responseLength;
    for (let i = 0; i < s.versions.length; i++) {
      if (!s.actionMask[i]) continue;
      const lag = trainerVersion - s.versions[i]!;
      staleSum += lag;
      staleN++;
      if (lag > staleMax) staleMax = lag;
    }
  }
  return {
    ...stats,
    rewardMean: trajectories.reduce((a, t) => a + t.reward, 0) / Math.max(1, trajectories.length),
    kl: batch.meanKl,
    klCoef,
    ...(critic ? { valueLoss: critic.valueLoss } : {}),
    responseLength: respLen / Math.max(1, samples.length),
    staleMean: staleN ? staleSum / staleN : 0,
    staleMax,
    samples: samples.length,
    experienceMs: t1 - t0,
    trainMs: t2 - t1,
  };
}

/** Sends the trainer's weights to every engine; returns the new version and the time taken. */
export async function publishWeights(roles: Roles): Promise<{ version: number; syncMs: number }> {
  const t0 = performance.now();
  const w = await roles.trainer.weights();
  await Promise.all(roles.rollouts.map((r) => r.updateWeights(w)));
  return { version: w.version, syncMs: performance.now() - t0 };
}
