/**
 * Experience where the data is (slime's data path): the trainer and the critic each fetch a step's
 * trajectories from the rollouts that put them, and make the same experience from them with
 * {@link experienceOf} — token rows, the reward model's scores or the agents' rewards (running
 * normalisation with `--normalize-reward`), KL against the reference, advantages and returns. The
 * driver sends only references, the KL coefficient and option objects ({@link StepBatch}); what
 * comes back is a few numbers.
 *
 * @module
 */
import type { AdvantageOptions } from '../algorithms/advantages.ts';
import { distillAdvantages, type DistillOptions } from '../algorithms/distillation.ts';
import {
  computeReturns,
  makeExperience as alignSamples,
  type ExperienceOptions,
  type ExperienceSample,
  type ReturnsOptions,
  type TrainingBatch,
} from '../algorithms/experience.ts';
import { RewardNormalizer } from '../algorithms/reward-normalizer.ts';
import type { Trajectory } from '../algorithms/trajectory.ts';
import { receive, receiveAll, type Handoff } from './handoff.ts';

/** How trajectories become experience: the run's options, the same for trainer and critic. */
export interface ExperienceConfig {
  experience: ExperienceOptions;
  /** How rewards become advantages (without the KL coefficient, which is per step). */
  returns: Omit<ReturnsOptions, 'klCoef'> & { advantage: AdvantageOptions };
  /** On-policy distillation (with a teacher). */
  distill?: DistillOptions;
  /** The trainer recomputes its own logprobs before the update (decoupled PPO, IS correction). */
  recompute?: boolean;
}

/** Running reward statistics (`--normalize-reward`), as a checkpoint stores them. */
export type RewardStats = { count: number; mean: number; m2: number };

/** One step's batch as the driver hands it to the trainer and the critic: references and numbers. */
export interface StepBatch {
  /** The kept groups' trajectories, in order (`GroupReport.batch`). */
  batches: Handoff<Trajectory[]>[];
  config: ExperienceConfig;
  /** The KL coefficient β of this step (the driver's KL controller). */
  klCoef: number;
  /** A reward model's score per trajectory, replacing the agents' rewards (`--reward-pretrain`). */
  scores?: number[];
  /** With `--normalize-reward`: the statistics before this step (absent: the first step). */
  rewardStats?: RewardStats | null;
  /** The reference policy's logprob rows (`Reference.logprobsOf`). */
  reference?: Handoff<number[][]>;
  /** The critic's value rows (`Critic.valuesOf`). */
  values?: Handoff<number[][]>;
  /** The distillation teacher's logprob rows. */
  teacher?: Handoff<number[][]>;
}

/** A step's experience. */
export interface Experience {
  trajectories: Trajectory[];
  samples: ExperienceSample[];
  /** Advantages and returns (with the teacher's reverse KL joined, under distillation). */
  batch: TrainingBatch;
  refLogprobs?: number[][];
  values?: number[][];
  /** The trainer's own logprobs before the update, when asked for. */
  old?: number[][];
  /** The reward statistics after this step (`--normalize-reward`). */
  rewardStats?: RewardStats;
  /** Mean reverse KL student − teacher (distillation). */
  opdReverseKl?: number;
}

/** The token sequences of a step's trajectories, fetched from the rollouts that put them. */
export async function fetchSequences(
  batches: readonly Handoff<Trajectory[]>[],
): Promise<number[][]> {
  const parts = await receiveAll(batches);
  return parts.flat().map((t) => Array.from(t.inputIds));
}

/**
 * Fetches a step's trajectories and makes its experience. `old` computes the policy's own
 * logprobs of the sequences (the trainer passes it when `config.recompute`); without it the
 * behaviour logprobs stand in for them.
 */
export async function experienceOf(
  step: StepBatch,
  old?: (seqs: number[][]) => Promise<number[][]>,
): Promise<Experience> {
  const [parts, refLogprobs, values, teacher] = await Promise.all([
    receiveAll(step.batches),
    step.reference && receive(step.reference),
    step.values && receive(step.values),
    step.teacher && receive(step.teacher),
  ]);
  const fetched = parts.flat();
  const { scores } = step;
  const trajectories = scores ? fetched.map((t, i) => ({ ...t, reward: scores[i]! })) : fetched;
  const samples = alignSamples(trajectories, step.config.experience);
  let rewardStats: RewardStats | undefined;
  if (step.rewardStats !== undefined) {
    const norm = new RewardNormalizer(step.rewardStats ?? undefined);
    const raw = samples.map((s) => s.score);
    norm.update(raw);
    norm.normalize(raw).forEach((v, i) => (samples[i]!.score = v));
    rewardStats = norm.state();
  }
  const own =
    old && step.config.recompute
      ? await old(samples.map((s) => Array.from(s.inputIds)))
      : undefined;
  const returns = computeReturns(
    samples,
    { ...(refLogprobs ? { refLogprobs } : {}), ...(values ? { values } : {}) },
    { ...step.config.returns, klCoef: step.klCoef },
  );
  // The teacher scores the tokens the student sampled; its reverse KL joins the advantages.
  const opd = teacher
    ? distillAdvantages(
        returns.advantages,
        samples.map((s) => s.actionMask),
        own ?? samples.map((s) => s.behaviourLogprobs),
        teacher,
        step.config.distill,
      )
    : undefined;
  return {
    trajectories,
    samples,
    batch: opd ? { ...returns, advantages: opd.advantages } : returns,
    ...(refLogprobs ? { refLogprobs } : {}),
    ...(values ? { values } : {}),
    ...(own ? { old: own } : {}),
    ...(rewardStats ? { rewardStats } : {}),
    ...(opd ? { opdReverseKl: opd.reverseKl } : {}),
  };
}
