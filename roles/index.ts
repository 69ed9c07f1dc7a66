/**
 * The roles (`rtjob/roles`): the actors a training loop is made of — a rollout that runs agent
 * episodes on an engine, a trainer, a reference model and a critic — as actor classes to start on
 * the cluster, with the types of what they take and return. `train_ppo` places them for you; a
 * hand-written loop starts them itself and calls the same methods (`examples/custom-loop.ts`):
 * `rollout.runGroup(item)` reports a group and hands its trajectories on by reference,
 * `trainer.trainStep({ batches, config, klCoef })` fetches them where they are and steps.
 *
 * @example
 * import { init } from 'rtjob';
 * import { RolloutActor, TrainerActor, tinyMathModelDir } from 'rtjob/roles';
 * await init();
 * const rollout = RolloutActor.remote({ pretrain: tinyMathModelDir, generateMaxLen: 48 });
 * const trainer = TrainerActor.remote({ pretrain: tinyMathModelDir, learningRate: 2e-4 });
 *
 * @module
 */
import { defineActor } from '../runtime/api.ts';
import { ownModule } from '../runtime/own-files.ts';
import type { Critic } from './critic.ts';
import type { Reference } from './reference.ts';
import type { Rollout } from './rollout.ts';
import type { Trainer } from './trainer.ts';

export type { Critic, CriticInit, CriticSample } from './critic.ts';
export type { Reference, ReferenceInit } from './reference.ts';
export type { PromptItem, Rollout, RolloutInit, RolloutStats } from './rollout.ts';
export type { Trainer, TrainerInit, TrainSample, TrainStats, TrainTiming } from './trainer.ts';
export type { GroupResult } from '../agents/episode-runner.ts';
export type { GroupReport } from './episode-report.ts';
export type { ExperienceConfig, StepBatch } from './experience.ts';
export { dropHandoff, type Handoff } from './handoff.ts';
export type { StepStats } from './trainer.ts';
export { tinyMathModelDir } from '../model/index.ts';

/** A role's module, the `.ts` source in the checkout or the compiled `.js` in the package. */
const role = (file: string): URL => ownModule(`./${file}`, import.meta.url);

/** The rollout as an actor: `RolloutActor.remote(init: RolloutInit)`. */
export const RolloutActor = defineActor<typeof Rollout>(role('rollout.ts'), 'Rollout');
/** The trainer as an actor: `TrainerActor.remote(init: TrainerInit)`. */
export const TrainerActor = defineActor<typeof Trainer>(role('trainer.ts'), 'Trainer');
/** The reference model as an actor: `ReferenceActor.remote(init: ReferenceInit)`. */
export const ReferenceActor = defineActor<typeof Reference>(role('reference.ts'), 'Reference');
/** The critic as an actor: `CriticActor.remote(init: CriticInit)`. */
export const CriticActor = defineActor<typeof Critic>(role('critic.ts'), 'Critic');
