/**
 * Places the roles through the runtime: each role is an actor in its own worker process, with the
 * resources its flags ask for, and ASYNC_NUM_TASKS / ASYNC_QUEUE_SIZE (and the driver's
 * RTJOB_TF_BACKEND) in every worker's env.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { actorInfo, defineActor, init, kill, placementGroup, shutdown } from '../../runtime/api.ts';
import { readEnv } from '../../runtime/env.ts';
import { isRtjobError } from '../../runtime/errors.ts';
import { ownModule } from '../../runtime/own-files.ts';
import type { ActorHandle, CallOptions, RemoteMethod } from '../../runtime/handles.ts';
import { Critic } from '../../roles/critic.ts';
import type { Reference } from '../../roles/reference.ts';
import type { RewardModel } from '../../roles/reward-model.ts';
import type { Rollout } from '../../roles/rollout.ts';
import { Trainer } from '../../roles/trainer.ts';
import type { TrainPpoOptions } from './options.ts';
import { RoleDiedError, type RoleName, TrainPpoError } from './errors.ts';
import { bundleCpus, placeRoles, type RolePlacement } from './placement.ts';
import {
  baseAsReference,
  referenceRole,
  replicated,
  roleBackends,
  roleInits,
  type Remote,
  type Roles,
} from './roles.ts';

const role = (file: string): URL => ownModule(`../../roles/${file}`, import.meta.url);
const RolloutActor = defineActor<typeof Rollout>(role('rollout.ts'), 'Rollout');
const TrainerActor = defineActor<typeof Trainer>(role('trainer.ts'), 'Trainer');
const ReferenceActor = defineActor<typeof Reference>(role('reference.ts'), 'Reference');
const RewardModelActor = defineActor<typeof RewardModel>(role('reward-model.ts'), 'RewardModel');
const CriticActor = defineActor<typeof Critic>(role('critic.ts'), 'Critic');

/**
 * Turns an actor handle into the loops' promise-returning view: `h.m(...)` → `h.m.remote(...)`
 * (with `callOptions`, if given). A call that fails because the actor died rejects with a
 * {@link RoleDiedError} naming the role. The handle's and the view's method types both derive
 * from `T`, so the driver stays typed end to end; only this adapter indexes the handle by a
 * runtime method name.
 */
function remote<T>(handle: ActorHandle<T>, role: RoleName, callOptions?: CallOptions): Remote<T> {
  const method = (prop: string): RemoteMethod<unknown[], unknown> | undefined => {
    const m = (handle as unknown as Partial<Record<string, RemoteMethod<unknown[], unknown>>>)[
      prop
    ];
    return callOptions ? m?.options(callOptions) : m;
  };
  return new Proxy(
    {},
    {
      get: (_t, prop) =>
        typeof prop === 'string' && prop !== 'then'
          ? async (...args: unknown[]) => {
              try {
                return await method(prop)!.remote(...args);
              } catch (err) {
                if (!isRtjobError(err, 'ACTOR_DIED')) throw err;
                const c = err.context;
                const how = c.signal
                  ? `signal ${c.signal}`
                  : c.exitCode != null
                    ? `exit code ${c.exitCode}`
                    : String(c.reason ?? 'unknown cause');
                const tail = c.stderrTail?.length
                  ? ` (stderr: ${c.stderrTail.slice(-3).join(' | ')})`
                  : '';
                throw new RoleDiedError(
                  role,
                  `its process ended (${how}) during '${prop}'${tail}`,
                  '',
                  { cause: err },
                );
              }
            }
          : undefined,
    },
  ) as Remote<T>;
}

/** How long a dead rollout may take to come back (the runtime starts a new worker). */
const restartWaitMs = 120_000;
/** Restarts the runtime gives a rollout's process (`maxRestarts`). */
const rolloutMaxRestarts = 3;

/**
 * The variables every role's worker gets: the async knobs, a quiet backend announcement, and the
 * driver's `RTJOB_TF_BACKEND`, so that its choice holds for every role, also on nodes that did
 * not start from the driver's shell. Colocated, each role computes on its bundle's cores
 * (`OMP_NUM_THREADS`, libtorch's intra-op threads), as Ray sets it from an actor's CPUs: left to
 * itself every libtorch process would start a thread per core of the machine, and two engines
 * (or two trainer ranks) on two cores would run four spinning threads. The driver's own
 * `OMP_NUM_THREADS` wins.
 */
export function roleEnv(
  o: Pick<TrainPpoOptions, 'asyncNumTasks' | 'asyncQueueSize' | 'colocateAllModels'>,
  source: Readonly<Record<string, string | undefined>> = process.env,
): Record<string, string> {
  const backend = readEnv('RTJOB_TF_BACKEND', source);
  const threads = source.OMP_NUM_THREADS ?? (o.colocateAllModels ? String(bundleCpus) : undefined);
  return {
    ASYNC_NUM_TASKS: String(o.asyncNumTasks),
    ASYNC_QUEUE_SIZE: String(o.asyncQueueSize),
    RTJOB_QUIET_BACKEND: '1',
    ...(backend ? { RTJOB_TF_BACKEND: backend } : {}),
    ...(threads ? { OMP_NUM_THREADS: threads } : {}),
  };
}

/** The roles as actors on the cluster (a local one is started when none runs). */
export async function remoteRoles(o: TrainPpoOptions, totalSteps: number): Promise<Roles> {
  await init();
  const inits = roleInits(o, totalSteps);
  const env = roleEnv(o);
  const placement = placeRoles(o);
  const pg = placement.bundles.length
    ? placementGroup(placement.bundles, { strategy: placement.strategy })
    : undefined;
  if (pg) await pg.ready();
  const place = (p: RolePlacement) => ({
    numCpus: p.numCpus,
    numGpus: p.numGpus,
    ...(pg && p.bundleIndex !== undefined
      ? { placementGroup: pg, bundleIndex: p.bundleIndex }
      : {}),
  });
  // Each actor is named for its role, under the job's id (names are unique in a cluster, and two
  // runs may share one): `job_…/rollout-0`, `job_…/trainer`; the dashboard shows the role part.
  const run = randomUUID().slice(0, 8);
  const scope = readEnv('RTJOB_JOB_ID') ?? `train_ppo-${run}`;
  const named = (role: string, rank: number, of: number) =>
    `${scope}/${role}${of > 1 || role === 'rollout' ? `-${rank}` : ''}`;
  const handles: ActorHandle<unknown>[] = [];
  const rolloutHandles: ActorHandle<Rollout>[] = [];
  const rollouts = Array.from({ length: o.rolloutNumEngines }, (_, i) => {
    const h = RolloutActor.options({
      name: named('rollout', i, o.rolloutNumEngines),
      ...place(placement.rollout(i)),
      maxConcurrency: 100000,
      maxRestarts: rolloutMaxRestarts,
      env,
    }).remote(inits.rollout(i));
    handles.push(h);
    rolloutHandles.push(h);
    return remote(h, 'rollout');
  });
  // Data-parallel ranks meet in a collective group named for this run.
  const dp = (role: string, rank: number, worldSize: number) =>
    worldSize > 1 ? { dataParallel: { group: `${role}-${run}`, rank, worldSize } } : {};
  const trainerRanks = Array.from({ length: o.actorNumReplicas }, (_, rank) => {
    const h = TrainerActor.options({
      name: named('trainer', rank, o.actorNumReplicas),
      ...place(placement.role('trainer', rank)),
      maxConcurrency: 1,
      env,
    }).remote({ ...inits.trainer, ...dp('trainer', rank, o.actorNumReplicas) });
    handles.push(h);
    return remote(h, 'trainer');
  });
  const trainer = replicated(trainerRanks, Trainer);
  // Rank 0 (created right after the rollouts) owns the weights the engines fetch.
  const trainerHandle = handles[rollouts.length]!;
  let reference: Remote<Reference> | undefined;
  if (referenceRole(o)) {
    const h = ReferenceActor.options({
      name: named('reference', 0, 1),
      ...place(placement.role('reference')),
      env,
    }).remote(inits.reference);
    handles.push(h);
    reference = remote(h, 'reference');
  }
  let teacher: Remote<Reference> | undefined;
  if (o.teacherPretrain) {
    const h = ReferenceActor.options({
      name: named('teacher', 0, 1),
      ...place(placement.role('teacher')),
      env,
    }).remote(inits.teacher);
    handles.push(h);
    teacher = remote(h, 'teacher');
  }
  let rewardModel: Remote<RewardModel> | undefined;
  if (o.rewardPretrain) {
    const h = RewardModelActor.options({
      name: named('reward', 0, 1),
      ...place(placement.role('reward')),
      env,
    }).remote(inits.rewardModel);
    handles.push(h);
    rewardModel = remote(h, 'reward');
  }
  let critic: Remote<Critic> | undefined;
  if (o.advantageEstimator === 'gae') {
    const ranks = Array.from({ length: o.criticNumReplicas }, (_, rank) => {
      const h = CriticActor.options({
        name: named('critic', rank, o.criticNumReplicas),
        ...place(placement.role('critic', rank)),
        env,
      }).remote({
        ...inits.critic,
        ...dp('critic', rank, o.criticNumReplicas),
      });
      handles.push(h);
      return remote(h, 'critic');
    });
    critic = replicated(ranks, Critic);
  }
  const [rolloutsReady, trainerReady, referenceReady, criticReady] = await Promise.all([
    // A rollout that dies while it first loads (engine, tokenizer, agent file) is restarted by
    // the runtime; its `ready` (idempotent) runs again there instead of failing the run.
    Promise.all(
      rolloutHandles.map((h) =>
        remote(h, 'rollout', { maxTaskRetries: rolloutMaxRestarts }).ready(),
      ),
    ),
    trainer.ready(),
    reference?.ready(),
    critic?.ready(),
    teacher?.ready(),
    rewardModel?.ready(),
  ]);
  const nodeOf = async (h: ActorHandle<unknown>) => (await actorInfo(h)).nodeId;
  const nodes = {
    trainer: await nodeOf(trainerHandle),
    rollouts: await Promise.all(handles.slice(0, rollouts.length).map(nodeOf)),
  };
  // The incarnation each rollout's driver view was last made ready on.
  const ready = await Promise.all(
    rolloutHandles.map(async (h) => (await actorInfo(h)).incarnation),
  );
  return {
    rollouts,
    trainer,
    backends: roleBackends(o.engine, {
      rollouts: rolloutsReady,
      trainer: trainerReady,
      reference: referenceReady,
      critic: criticReady,
    }),
    ...(reference ? { reference } : {}),
    ...(teacher ? { teacher } : {}),
    ...(rewardModel ? { rewardModel } : {}),
    ...(o.initKlCoef > 0 && !reference ? { reference: baseAsReference(trainer) } : {}),
    ...(critic ? { critic } : {}),
    // Rank 0 puts the weights once; engines fetch them from it (weight-sync.ts).
    policy: () => trainer.shareWeights(),
    nodes,
    // The runtime restarts the process (maxRestarts); once the head has a newer incarnation up,
    // the handle reaches it and it loads its engine here. The driver then pushes the current
    // weights (generate.ts).
    restartRollout: async (i: number) => {
      const h = rolloutHandles[i]!;
      const end = Date.now() + restartWaitMs;
      for (;;) {
        const info = await actorInfo(h);
        if (info.state === 'DEAD') {
          throw new RoleDiedError(
            'rollout',
            `it was not restarted (${info.deathCause?.message ?? 'dead'})`,
          );
        }
        if (info.state === 'ALIVE' && info.incarnation > ready[i]!) {
          ready[i] = info.incarnation;
          nodes.rollouts[i] = info.nodeId;
          break;
        }
        if (Date.now() > end)
          throw new TrainPpoError(
            'TRAIN_PPO_ROLLOUT_RESTART',
            `rollout ${i} was not restarted within ${restartWaitMs / 1000} s`,
          );
        // The head tells of a restart only when asked; a short poll is what waiting costs here.
        await delay(100);
      }
      await rollouts[i]!.ready();
    },
    killRollout: (i: number) => kill(rolloutHandles[i]!, { noRestart: false }),
    close: async () => {
      await Promise.allSettled(handles.map((h) => kill(h, { noRestart: true })));
      await pg?.remove();
      await shutdown();
    },
  };
}
