/**
 * The asynchronous off-policy loop (`--async-train`). A producer generates whole batches into a
 * buffer of at most `ASYNC_QUEUE_SIZE` batches: it takes a slot before generating, and the trainer
 * returns the slot when it takes the batch, so the producer waits when the buffer is full and
 * nothing is dropped. The trainer trains on a batch as soon as one is ready and publishes new
 * weights while the next batches are generated.
 *
 * Weight updates: by default a publish waits for the batch being generated to finish, and the
 * next batch starts on the new weights, so no batch mixes versions. With `--partial-rollout` the
 * publish does not wait: engines swap weights between decode steps and every token keeps the
 * version that produced it. A batch is at most `queueSize` versions stale (one more with partial
 * rollout); staleness is measured per token and logged each step.
 *
 * Nothing waits that need not. After a batch the trainer snapshots its weights and goes on with
 * the next batch; the snapshot reaches the engines once no batch in generation or evaluation holds
 * their weights (a readers–writer {@link WeightsGate}), and the trainer waits only if that publish
 * has not landed by the end of its next batch, which keeps the staleness bound. A held-out
 * evaluation (`--eval-steps`) runs on the engines beside generation, holding the weights it
 * measures. Each step logs where both sides spent their time (`trainer_wait_s`,
 * `previous_publish_wait_s`, `publish_wait_s`, busy fractions).
 *
 * @module
 */
import type { GroupResult } from '../../agents/episode-runner.ts';
import { StalenessThrottle } from '../../algorithms/staleness.ts';
import { TrajectoryBuffer } from '../../algorithms/trajectory-buffer.ts';
import { WeightsGate } from '../../engines/weights-gate.ts';
import type { DataPosition } from './data.ts';
import { afterStep, recordUpdate } from './context.ts';
import type { PolicyUpdate } from './roles.ts';
import type { RunContext } from './run-state.ts';
import { recordEpisodes } from './episodes.ts';
import { account, evaluate, generate } from './generate.ts';
import { filterGroups, trainOn } from './step.ts';
import { syncWeights, trainerWeights } from './weight-sync.ts';
import { TrainPpoError } from './errors.ts';

/** What the producer attaches to each batch of the buffer besides its trajectories. */
interface BatchMeta {
  /** Every group of the batch, failed ones included (the consumer accounts for them). */
  groups: GroupResult[];
  /** Weight version when generation of this batch started. */
  version: number;
  generateMs: number;
  /** Data position after this batch's prompts: what a checkpoint after training on it records. */
  position: DataPosition;
}

/** Runs `--async-train` until `totalSteps`: a producer and a consumer on a {@link TrajectoryBuffer}. */
export async function asyncLoop(ctx: RunContext): Promise<void> {
  const { o, roles, state } = ctx;
  const buffer = new TrajectoryBuffer<BatchMeta>({ queueSize: o.asyncQueueSize });
  // Readers hold the engines' weights fixed: a batch being generated (unless --partial-rollout)
  // and an evaluation; a weight publish is the writer.
  const gate = new WeightsGate();
  const evals: Promise<void>[] = [];
  // Aborted by the first failure of the producer, an evaluation or a weight publish (they run
  // beside training), and when the loop ends: it wakes whoever waits on the buffer or throttle.
  const stopping = new AbortController();
  const fail = (err: unknown): void => {
    if (!stopping.signal.aborted) stopping.abort(err);
  };
  let publishing: Promise<void> = Promise.resolve();
  let lastPublish = { waitMs: 0, syncMs: 0 };
  // afterStep must not evaluate: here evaluation runs beside training (below).
  const stepCtx: RunContext = { ...ctx, o: { ...o, evalSteps: 0 } };
  // The version on the engines, and the trainer's (ahead by one while a publish waits).
  let version = await roles.trainer.getVersion();
  let trainerVersion = version;
  const timing = { producerWaitMs: 0, producerBusyMs: 0, trainerBusyMs: 0 };
  const toProduce = ctx.totalSteps - state.step;
  const bound = stalenessBound(o);
  // The admission rule (AReaL's throttle): batch n may start only once n − η batches are trained,
  // so no token is more than η versions stale. Without --max-head-offpolicyness, η is the bound
  // the queue already implies, and the buffer's slots are what binds.
  const throttle = new StalenessThrottle({
    consumerBatchSize: 1,
    maxConcurrentRollouts: o.asyncQueueSize + 1,
    maxHeadOffpolicyness: bound.value,
  });
  let trainedHere = 0;

  /** Loads the staged `w` on every engine once no batch or evaluation holds their weights. */
  const publishBeside = async (w: PolicyUpdate, step: number, stageMs: number): Promise<void> => {
    const p0 = performance.now();
    await gate.write();
    const p1 = performance.now();
    try {
      await syncWeights(ctx, w, 'apply');
    } finally {
      gate.done();
    }
    version = w.version;
    lastPublish = { waitMs: p1 - p0, syncMs: stageMs + performance.now() - p1 };
    throttle.setVersion(++trainedHere);
    if (
      o.evalSteps > 0 &&
      step % o.evalSteps === 0 &&
      step < ctx.totalSteps &&
      ctx.evalItems.length
    ) {
      evals.push(evaluateBeside(ctx, gate, step).catch(fail));
    }
  };

  const producer = (async () => {
    for (let n = 0; n < toProduce; n++) {
      const w0 = performance.now();
      const slot = await buffer.acquire(stopping.signal);
      try {
        await throttle.admit(stopping.signal);
      } catch (err) {
        slot.abort();
        throw err;
      }
      timing.producerWaitMs += performance.now() - w0;
      const g0 = performance.now();
      if (!o.partialRollout) await gate.read();
      const batchVersion = version;
      const items = ctx.sampler.next(o.rolloutBatchSize);
      const position = { ...ctx.sampler.position };
      let groups: GroupResult[];
      try {
        groups = await generate(ctx, items);
      } catch (err) {
        slot.abort();
        throw err;
      } finally {
        if (!o.partialRollout) gate.done();
        throttle.finish(true);
      }
      const ms = performance.now() - g0;
      timing.producerBusyMs += ms;
      // The batch travels once, as its groups (the filter and the accounting need them whole);
      // the buffer bounds how many batches run ahead of the trainer, it stages no second copy.
      slot.commit({ groups, version: batchVersion, generateMs: ms, position });
    }
  })().catch((err: unknown) => {
    // Once the loop is stopping, the producer's wake-up is not a failure.
    if (!stopping.signal.aborted) fail(err);
  });

  try {
    while (state.step < ctx.totalSteps) {
      const w0 = performance.now();
      const lease = await buffer.take({ signal: stopping.signal });
      if (!lease)
        throw new TrainPpoError(
          'TRAIN_PPO_ASYNC',
          'the trajectory buffer closed before the run ended',
        );
      const waitMs = performance.now() - w0;
      const fill = buffer.stats().queued + 1;
      const batch = lease.batch.meta;
      const t0 = performance.now();
      account(ctx, batch.groups);
      const { kept, passRate } = filterGroups(batch.groups, o);
      state.step++;
      state.position = batch.position;
      const episodes = recordEpisodes(ctx, batch.groups, trainerVersion);
      if (kept.length === 0) {
        lease.ack();
        ctx.log.line(
          `step ${state.step}: no group passed (pass rate ${passRate.toFixed(2)}); skipped`,
        );
        await afterStep(stepCtx, {
          ...episodes,
          pass_rate: passRate,
          episodes_failed: state.failed,
          generate_s: batch.generateMs / 1000,
        });
        continue;
      }
      const u = await trainOn(
        kept.flatMap((g) => g.trajectories),
        roles,
        o,
        ctx,
        trainerVersion,
      );
      lease.ack();
      if (u.staleMax > bound.value) {
        throw new TrainPpoError(
          'TRAIN_PPO_ASYNC',
          `staleness ${u.staleMax} exceeds the bound ${bound.value} set by ${bound.by}`,
        );
      }
      trainerVersion = u.version;
      // Versions reach the engines in order, and at most one waits: the trainer goes on only once
      // the previous publish has landed, which keeps the staleness bound of the queue.
      const p0 = performance.now();
      await publishing;
      const previousPublishWaitMs = performance.now() - p0;
      stopping.signal.throwIfAborted();
      // A snapshot now (the trainer is idle), pushed once the engines may change version: the
      // trainer trains the next batch meanwhile instead of waiting for the batch in generation.
      const s0 = performance.now();
      const snapshot = await trainerWeights(ctx);
      // The engines fetch it now, while the trainer is idle (weight-sync.ts: stagePolicy).
      await syncWeights(ctx, snapshot, 'stage');
      const stageMs = performance.now() - s0;
      const step = state.step;
      publishing = publishBeside(snapshot, step, stageMs).catch(fail);
      const busy = performance.now() - t0;
      timing.trainerBusyMs += busy;
      const wall = performance.now() - ctx.started;
      await afterStep(stepCtx, {
        ...episodes,
        ...recordUpdate(ctx, kept, u, passRate),
        buffer_fill: fill,
        generate_s: batch.generateMs / 1000,
        weight_sync_s: lastPublish.syncMs / 1000,
        weight_sync_share: lastPublish.syncMs / Math.max(1, busy + waitMs),
        publish_wait_s: lastPublish.waitMs / 1000,
        previous_publish_wait_s: previousPublishWaitMs / 1000,
        trainer_wait_s: waitMs / 1000,
        producer_wait_s: timing.producerWaitMs / 1000,
        rollout_busy_fraction: timing.producerBusyMs / wall,
        trainer_busy_fraction: timing.trainerBusyMs / wall,
        step_s: (busy + waitMs) / 1000,
        samples_per_s: (u.samples * 1000) / Math.max(1, busy + waitMs),
        episodes_per_s:
          (batch.groups.reduce((n, g) => n + g.episodes, 0) * 1000) / Math.max(1, busy + waitMs),
        tokens_per_s: (u.tokens * 1000) / Math.max(1, busy + waitMs),
        version: trainerVersion,
      });
    }
    await publishing;
    await Promise.all(evals);
    stopping.signal.throwIfAborted();
  } finally {
    const failed = stopping.signal.aborted;
    stopping.abort(new Error('async training stopped'));
    buffer.close();
    await producer;
    await Promise.all(evals);
    // The first failure is what the caller sees, not the wake-up of a waiting take.
    if (failed) stopping.signal.throwIfAborted();
  }
}

/**
 * Evaluates the weights of `step` on the engines while training goes on: it holds the gate as a
 * reader, so the next publish waits for it, and generation shares the engines' decode batches.
 */
async function evaluateBeside(ctx: RunContext, gate: WeightsGate, step: number): Promise<void> {
  const t0 = performance.now();
  await gate.read();
  let acc: number;
  try {
    acc = await evaluate(ctx);
  } finally {
    gate.done();
  }
  const s = (performance.now() - t0) / 1000;
  ctx.log.metric(step, { eval_accuracy: acc, eval_s: s });
  ctx.log.line(
    `eval  step ${step}: held-out accuracy ${(acc * 100).toFixed(1)}% (${ctx.evalItems.length} prompts, greedy, ${s.toFixed(1)}s beside training)`,
  );
}

/**
 * The most versions a trained token may lag: the queue size (a batch starts only once a slot is
 * free, i.e. once the batch `queueSize` ahead of it was taken), one more when weights may change
 * mid-batch (`--partial-rollout`), and at most η with `--max-head-offpolicyness`.
 */
export function stalenessBound(o: RunContext['o']): { value: number; by: string } {
  const queue = o.asyncQueueSize + (o.partialRollout ? 1 : 0);
  if (o.maxHeadOffpolicyness !== undefined && o.maxHeadOffpolicyness < queue) {
    return {
      value: o.maxHeadOffpolicyness,
      by: `--max-head-offpolicyness ${o.maxHeadOffpolicyness}`,
    };
  }
  return {
    value: queue,
    by: `--async-queue-size ${o.asyncQueueSize}${o.partialRollout ? ' with --partial-rollout' : ''}`,
  };
}
