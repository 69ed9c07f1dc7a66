/**
 * Places the roles through the runtime: each role is an actor in its own worker process, with the
 * resources its flags ask for, and ASYNC_NUM_TASKS / ASYNC_QUEUE_SIZE in every worker's env.
 *
 * @module
 */
import { defineActor, init, kill, placementGroup, shutdown } from '../../runtime/api.ts';
import type { Critic } from '../../actors/critic.ts';
import type { Reference } from '../../actors/reference.ts';
import type { Rollout } from '../../actors/rollout.ts';
import type { Trainer } from '../../actors/trainer.ts';
import type { TrainPpoOptions } from './flags.ts';
import { roleInits, type Remote, type Roles } from './roles.ts';

const actorsDir = new URL('../../actors/', import.meta.url);
const RolloutActor = defineActor<typeof Rollout>(new URL('rollout.ts', actorsDir), 'Rollout');
const TrainerActor = defineActor<typeof Trainer>(new URL('trainer.ts', actorsDir), 'Trainer');
const ReferenceActor = defineActor<typeof Reference>(new URL('reference.ts', actorsDir), 'Reference');
const CriticActor = defineActor<typeof Critic>(new URL('critic.ts', actorsDir), 'Critic');

/** Turns an actor handle into the loops' promise-returning view: `h.m(...)` → `h.m.remote(...)`. */
function remote<T>(handle: unknown): Remote<T> {
  return new Proxy(
    {},
    {
      get: (_t, prop) =>
        typeof prop === 'string' && prop !== 'then'
          ? (...args: unknown[]) => (handle as Record<string, { remote(...a: unknown[]): PromiseLike<unknown> }>)[prop]!.remote(...args)
          : undefined,
    },
  ) as Remote<T>;
}

/** The roles as actors on the cluster (a local one is started when none runs). */
export async function remoteRoles(o: TrainPpoOptions, totalSteps: number): Promise<Roles> {
  await init();
  const inits = roleInits(o, totalSteps);
  const env = { ASYNC_NUM_TASKS: String(o.asyncNumTasks), ASYNC_QUEUE_SIZE: String(o.asyncQueueSize), RTJOB_QUIET_BACKEND: '1' };
  const pg = o.colocateAllModels ? placementGroup([{ CPU: 0 }], { strategy: 'STRICT_PACK' }) : undefined;
  if (pg) await pg.ready();
  const place = pg ? { placementGroup: pg, bundleIndex: 0 } : {};
  const handles: unknown[] = [];
  const rollouts = Array.from({ length: o.rolloutNumEngines }, (_, i) => {
    const h = RolloutActor.options({ numCpus: 0, numGpus: o.rolloutNumGpusPerEngine, maxConcurrency: 100000, maxRestarts: 3, env, ...place }).remote(inits.rollout(i));
    handles.push(h);
    return remote<Rollout>(h);
  });
  const t = TrainerActor.options({ numCpus: 0, numGpus: o.actorNumGpusPerNode, maxConcurrency: 1, env, ...place }).remote(inits.trainer);
  handles.push(t);
  const trainer = remote<Trainer>(t);
  let reference: Remote<Reference> | undefined;
  if (o.initKlCoef > 0) {
    const h = ReferenceActor.options({ numCpus: 0, numGpus: o.refNumGpusPerNode, env, ...place }).remote(inits.reference);
    handles.push(h);
    reference = remote<Reference>(h);
  }
  let critic: Remote<Critic> | undefined;
  if (o.advantageEstimator === 'gae') {
    const h = CriticActor.options({ numCpus: 0, numGpus: o.criticNumGpusPerNode, env, ...place }).remote(inits.critic);
    handles.push(h);
    critic = remote<Critic>(h);
  }
  await Promise.all([...rollouts.map((r) => r.ready()), trainer.ready(), reference?.ready(), critic?.ready()]);
  return {
    rollouts,
    trainer,
    ...(reference ? { reference } : {}),
    ...(critic ? { critic } : {}),
    close: async () => {
      await Promise.allSettled(handles.map((h) => kill(h as Parameters<typeof kill>[0], { noRestart: true })));
      await pg?.remove();
      await shutdown();
    },
  };
}
