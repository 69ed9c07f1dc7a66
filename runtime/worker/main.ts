/**
 * Entry point of a worker process, started by the node agent with `--import tsx`. It connects to
 * the head, fetches its assignment, loads the actor (reporting `ActorLoadError` before it ever
 * registers), then serves direct calls and object fetches on its own port.
 *
 * @module
 */
import { existsSync } from 'node:fs';
import { installCodec } from '../client/codec.ts';
import { Runtime } from '../client/runtime.ts';
import { readEnv } from '../env.ts';
import { ActorLoadError, toWire } from '../errors.ts';
import { logger } from '../log.ts';
import type { Call } from '../protocol.ts';
import type { Connection } from '../transport.ts';
import { Executor } from './executor.ts';
import { Lease } from './lease.ts';
import { GroupThread } from './group-thread.ts';
import { constructActor, constructorArgs, taskRunner } from './load.ts';

const log = logger('worker');
const env = process.env;

// The node agent holds the other end of the IPC channel; when it goes, so do we.
process.on('disconnect', () => process.exit(0));

if (readEnv('RTJOB_WARM')) {
  // Booted ahead of time: wait for the node agent to say which actor this process becomes.
  const msg = await new Promise<{ env: Record<string, string>; unset: string[] }>((resolve) => {
    const onMessage = (m: { type?: string; env: Record<string, string>; unset: string[] }) => {
      if (m?.type !== 'assign') return;
      process.off('message', onMessage);
      resolve(m);
    };
    process.on('message', onMessage);
    // Booted: the agent may boot the next idle worker of its pool.
    process.send?.({ type: 'warm' });
  });
  for (const k of msg.unset) delete env[k];
  Object.assign(env, msg.env);
}
const actorId = readEnv('RTJOB_ACTOR_ID') ?? '';
const incarnation = readEnv('RTJOB_INCARNATION') ?? 0;
// A job's actors run in the job's working dir (set by the job supervisor), so relative paths
// such as `--agent-func ./agent.ts` mean the same in every actor as in the driver.
const workingDir = readEnv('RTJOB_WORKING_DIR');
if (workingDir && existsSync(workingDir)) process.chdir(workingDir);

installCodec();
const rt = await Runtime.start({
  headAddress: readEnv('RTJOB_HEAD_ADDRESS') ?? '',
  token: readEnv('RTJOB_TOKEN') ?? '',
  kind: 'worker',
  actorId,
  incarnation,
  host: readEnv('RTJOB_WORKER_HOST'),
  nodeId: readEnv('RTJOB_NODE_ID'),
  // Set by a node agent that outlives a head restart: the worker (and its state) waits for it.
  reconnectMs: readEnv('RTJOB_HEAD_RECONNECT_MS') ?? 0,
});
rt.onHeadLost(() => process.exit(0));

const assignment = await rt.head.request({ type: 'workerHello', actorId, incarnation });
// Actors this actor creates belong to the same job and inherit its env (api.ts reads these two).
if (assignment.options.jobId) env.RTJOB_JOB_ID = assignment.options.jobId;
env.RTJOB_JOB_ENV ??= JSON.stringify(assignment.options.env ?? {});

let handle: (m: Call, conn: Connection) => unknown;
let exec: Executor;
try {
  if (assignment.spec.kind === 'tasks') {
    const runner = taskRunner(actorId);
    const tasks = new Executor(runner, assignment.options.maxConcurrency, actorId);
    handle = (m, conn) => runner.prepare(m.method).then(() => tasks.handle(m, conn));
    exec = tasks;
  } else {
    const args = await constructorArgs(assignment);
    const lookup = await constructActor(assignment.spec, args, actorId);
    // Groups on threads of their own, each with its own instance built from the same arguments.
    const threads = await Promise.all(
      (assignment.options.threadGroups ?? []).map((group) =>
        GroupThread.start({ spec: assignment.spec, args, actorId, group }, (why) => {
          log.error(`${why}; the actor exits`);
          process.exit(1);
        }),
      ),
    );
    const actor = new Executor(
      lookup,
      assignment.options.maxConcurrency,
      actorId,
      assignment.options.concurrencyGroups,
      threads,
    );
    handle = (m, conn) => actor.handle(m, conn);
    exec = actor;
  }
} catch (e) {
  const err =
    e instanceof ActorLoadError
      ? e
      : new ActorLoadError(String((e as Error).message ?? e), { cause: e });
  log.error(err.message);
  await rt.head
    .request({ type: 'actorLoadFailed', actorId, incarnation, error: toWire(err) })
    .catch(() => {});
  process.exit(1);
}
// Calls served are reported to the head every few seconds (Prometheus `rtjob_actor_calls_total`).
let calls = 0;
let reported = 0;
let lease: Lease | undefined;
rt.callHandler = (m, conn) => {
  calls++;
  lease?.check();
  return handle(m, conn);
};
rt.callControl = exec;
setInterval(() => {
  if (calls === reported || rt.head.closed) return;
  rt.head.send({ type: 'workerStats', calls: calls - reported });
  reported = calls;
}, 2000).unref();
await rt.head.request({
  type: 'actorReady',
  actorId,
  incarnation,
  address: rt.address,
  pid: process.pid,
});
lease = new Lease(rt, actorId, incarnation, exec, (why) => {
  log.warn(`${why}; exiting without running the calls held meanwhile`);
  process.exit(1);
});
process.send?.({ type: 'ready' });
