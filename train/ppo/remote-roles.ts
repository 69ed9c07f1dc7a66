/**
 * Places the roles through the runtime: each role is an actor in its own worker process, with the
 * resources its flags ask for, and ASYNC_NUM_TASKS / ASYNC_QUEUE_SIZE (and the driver's
 * RTJOB_TF_BACKEND) in every worker's env.
 *
 * @module
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import {
  actorInfo,
  defineActor,
  init,
  kill,
  listNodes,
  placementGroup,
  shutdown,
  type PlacementGroup,
} from '../../runtime/api.ts';
import { readEnv } from '../../runtime/env.ts';
import { isRtjobError } from '../../runtime/errors.ts';
import { ownModule } from '../../runtime/own-files.ts';
import type {
  ActorHandle,
  ActorOptions,
  CallOptions,
  RemoteMethod,
} from '../../runtime/handles.ts';
import type { DataParallelInit } from '../../roles/data-parallel.ts';
import { Critic } from '../../roles/critic.ts';
import type { Reference } from '../../roles/reference.ts';
import type { RewardModel } from '../../roles/reward-model.ts';
import type { Rollout } from '../../roles/rollout.ts';
import { Trainer } from '../../roles/trainer.ts';
import type { TrainPpoOptions } from './options.ts';
import type { RunConfig } from './run-config.ts';
import { RoleDiedError, type RoleName, TrainPpoError } from './errors.ts';
import { FlagError } from '../driver-flags.ts';
import { gpuProblem } from './gpu-check.ts';
import { bundleCpus, placeRoles, type RunRoles } from './placement.ts';
import {
  baseAsReference,
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

/** Starts a run's actors, each named for its role and placed where the run's placement puts it. */
interface Placer {
  /**
   * Starts rank `rank` of `of` of `role`: `create` gets the actor options of its place, name and
   * the role env, and starts it.
   */
  start<T>(
    role: RoleName,
    rank: number,
    of: number,
    create: (options: ActorOptions) => ActorHandle<T>,
  ): ActorHandle<T>;
  /** Every actor started, in order. */
  handles: ActorHandle<unknown>[];
  pg: PlacementGroup | undefined;
  /** Data-parallel ranks meet in a collective group named for this run. */
  dp(role: RoleName, rank: number, worldSize: number): { dataParallel?: DataParallelInit };
}

/** The placement group of the run's bundles (if any), and a {@link Placer} on it. */
async function placer(o: TrainPpoOptions, roles: RunRoles): Promise<Placer> {
  // GPUs no node offers fail here naming the flag, not as an infeasible placement group.
  const alive = (await listNodes()).filter((n) => n.state === 'ALIVE');
  const gpus = gpuProblem(
    o,
    alive.map((n) => n.total.GPU ?? 0),
  );
  if (gpus) throw new FlagError(gpus.flag, gpus.message);
  const env = roleEnv(o);
  const placement = placeRoles(o, roles);
  const pg = placement.bundles.length
    ? placementGroup(placement.bundles, { strategy: placement.strategy })
    : undefined;
  if (pg) await pg.ready();
  // Each actor is named for its role, under the job's id (names are unique in a cluster, and two
  // runs may share one): `job_…/rollout-0`, `job_…/trainer`; the dashboard shows the role part.
  const run = randomUUID().slice(0, 8);
  const scope = readEnv('RTJOB_JOB_ID') ?? `train_ppo-${run}`;
  const handles: ActorHandle<unknown>[] = [];
  return {
    handles,
    pg,
    dp: (role, rank, worldSize) =>
      worldSize > 1 ? { dataParallel: { group: `${role}-${run}`, rank, worldSize } } : {},
    start(role, rank, of, create) {
      const p = role === 'rollout' ? placement.rollout(rank) : placement.role(role, rank);
      const h = create({
        name: `${scope}/${role}${of > 1 || role === 'rollout' ? `-${rank}` : ''}`,
        numCpus: p.numCpus,
        numGpus: p.numGpus,
        ...(pg && p.bundleIndex !== undefined
          ? { placementGroup: pg, bundleIndex: p.bundleIndex }
          : {}),
        env,
      });
      handles.push(h);
      return h;
    },
  };
}

/** The run's actors, started (not yet ready). */
interface Started {
  rollouts: ActorHandle<Rollout>[];
  /** Rank 0, which owns the weights the engines fetch. */
  trainerHandle: ActorHandle<Trainer>;
  trainer: Remote<Trainer>;
  reference?: Remote<Reference>;
  teacher?: Remote<Reference>;
  rewardModel?: Remote<RewardModel>;
  critic?: Remote<Critic>;
}

/**
 * Starts every role's actors, in this order: the rollouts, the trainer's ranks, the reference,
 * the teacher, the reward model, the critic's ranks.
 */
function startRoles(c: RunConfig, at: Placer): Started {
  const { flags: o } = c;
  const inits = roleInits(c);
  const rollouts = Array.from({ length: o.rolloutNumEngines }, (_, i) =>
    at.start('rollout', i, o.rolloutNumEngines, (p) =>
      RolloutActor.options({
        ...p,
        maxConcurrency: 100000,
        maxRestarts: rolloutMaxRestarts,
      }).remote(inits.rollout(i)),
    ),
  );
  const n = o.actorNumReplicas;
  const trainerRanks = Array.from({ length: n }, (_, rank) =>
    at.start('trainer', rank, n, (p) =>
      TrainerActor.options({ ...p, maxConcurrency: 1 }).remote({
        ...inits.trainer,
        ...at.dp('trainer', rank, n),
      }),
    ),
  );
  const { roles } = c;
  const reference = roles.reference
    ? at.start('reference', 0, 1, (p) => ReferenceActor.options(p).remote(inits.reference))
    : undefined;
  const teacher = roles.teacher
    ? at.start('teacher', 0, 1, (p) => ReferenceActor.options(p).remote(inits.teacher))
    : undefined;
  const rewardModel = roles.rewardModel
    ? at.start('reward', 0, 1, (p) => RewardModelActor.options(p).remote(inits.rewardModel))
    : undefined;
  const m = roles.critics;
  const critic =
    m > 0
      ? Array.from({ length: m }, (_, rank) =>
          at.start('critic', rank, m, (p) =>
            CriticActor.options(p).remote({ ...inits.critic, ...at.dp('critic', rank, m) }),
          ),
        )
      : undefined;
  return {
    rollouts,
    trainerHandle: trainerRanks[0]!,
    trainer: replicated(
      trainerRanks.map((h) => remote(h, 'trainer')),
      Trainer,
    ),
    ...(reference ? { reference: remote(reference, 'reference') } : {}),
    ...(teacher ? { teacher: remote(teacher, 'teacher') } : {}),
    ...(rewardModel ? { rewardModel: remote(rewardModel, 'reward') } : {}),
    ...(critic
      ? {
          critic: replicated(
            critic.map((h) => remote(h, 'critic')),
            Critic,
          ),
        }
      : {}),
  };
}

/** Waits for every role's `ready()`; returns what each computes on ({@link roleBackends}). */
async function readyAll(engine: string, s: Started): Promise<string> {
  const [rollouts, trainer, reference, critic] = await Promise.all([
    // A rollout that dies while it first loads (engine, tokenizer, agent file) is restarted by
    // the runtime; its `ready` (idempotent) runs again there instead of failing the run.
    Promise.all(
      s.rollouts.map((h) => remote(h, 'rollout', { maxTaskRetries: rolloutMaxRestarts }).ready()),
    ),
    s.trainer.ready(),
    s.reference?.ready(),
    s.critic?.ready(),
    s.teacher?.ready(),
    s.rewardModel?.ready(),
  ]);
  return roleBackends(engine, { rollouts, trainer, reference, critic });
}

/**
 * Waits for a dead rollout's restart: the runtime restarts the process (maxRestarts); once the
 * head has a newer incarnation up than `ready[i]`, the handle reaches it and it loads its engine
 * here. The driver then pushes the current weights (generate.ts).
 */
function rolloutRestarter(
  handles: ActorHandle<Rollout>[],
  ready: number[],
  nodes: (string | undefined)[],
): (i: number) => Promise<void> {
  return async (i) => {
    const h = handles[i]!;
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
        nodes[i] = info.nodeId;
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
    await remote(h, 'rollout').ready();
  };
}

/** The roles as actors on the cluster (a local one is started when none runs). */
export async function remoteRoles(c: RunConfig): Promise<Roles> {
  const { flags: o } = c;
  await init();
  const at = await placer(o, c.roles);
  const s = startRoles(c, at);
  const backends = await readyAll(o.engine, s);
  const nodeOf = async (h: ActorHandle<unknown>) => (await actorInfo(h)).nodeId;
  const nodes = {
    trainer: await nodeOf(s.trainerHandle),
    rollouts: await Promise.all(s.rollouts.map(nodeOf)),
  };
  // The incarnation each rollout's driver view was last made ready on.
  const ready = await Promise.all(s.rollouts.map(async (h) => (await actorInfo(h)).incarnation));
  const { trainer, reference, teacher, rewardModel, critic } = s;
  return {
    rollouts: s.rollouts.map((h) => remote(h, 'rollout')),
    trainer,
    backends,
    ...(reference ? { reference } : {}),
    ...(teacher ? { teacher } : {}),
    ...(rewardModel ? { rewardModel } : {}),
    ...(c.roles.baseAsReference ? { reference: baseAsReference(trainer) } : {}),
    ...(critic ? { critic } : {}),
    // Rank 0 puts the weights once; engines fetch them from it (weight-sync.ts).
    policy: () => trainer.shareWeights(),
    nodes,
    restartRollout: rolloutRestarter(s.rollouts, ready, nodes.rollouts),
    restartedRollouts: async () =>
      (await Promise.all(s.rollouts.map(actorInfo))).flatMap((info, i) =>
        info.incarnation > ready[i]! ? [i] : [],
      ),
    killRollout: (i: number) => kill(s.rollouts[i]!, { noRestart: false }),
    close: async () => {
      await Promise.allSettled(at.handles.map((h) => kill(h, { noRestart: true })));
      await at.pg?.remove();
      await shutdown();
    },
  };
}
