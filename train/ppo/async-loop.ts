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
import type { GroupReport } from '../../roles/episode-report.ts';
import { StalenessThrottle } from '../../algorithms/staleness.ts';
import { TrajectoryBuffer } from '../../algorithms/trajectory-buffer.ts';
import { WeightsGate } from '../../engines/weights-gate.ts';
import type { DataPosition } from './data.ts';
import { afterStep, recordUpdate } from './context.ts';
import type { PolicyUpdate } from './roles.ts';
import type { RunContext } from './run-state.ts';
import { recordEpisodes } from './episodes.ts';
import { settleStep } from './ledger-run.ts';
import { shareProgress } from './preempt.ts';
import { account, evaluate, generate, trainKept } from './generate.ts';
import { filterGroups, releaseBatches } from './step.ts';
import { syncWeights, trainerWeights } from './weight-sync.ts';
import { TrainPpoError } from './errors.ts';

/** What the producer attaches to each batch of the buffer. */
interface BatchMeta {
  /** Every group of the batch, failed ones included (the consumer accounts for them). */
  groups: GroupReport[];
  /** Weight version when generation of this batch started. */
  version: number;
  generateMs: number;
  /** Data position after this batch's prompts: what a checkpoint after training on it records. */
  position: DataPosition;
}

/** What the producer and the consumer share, in one place instead of a closure's locals. */
interface AsyncState {
  ctx: RunContext;
  /** The context `afterStep` gets: evaluation runs beside training here, not after a step. */
  stepCtx: RunContext;
  buffer: TrajectoryBuffer<BatchMeta>;
  /** Readers hold the engines' weights fixed (a batch in generation, an evaluation); a publish writes. */
  gate: WeightsGate;
  /** AReaL's admission rule: batch n starts only once n − η batches are trained. */
  throttle: StalenessThrottle;
  bound: { value: number; by: string };
  /**
   * Aborted by the first failure of the producer, an evaluation or a weight publish (they run
   * beside training), and when the loop ends: it wakes whoever waits on the buffer or throttle.
   */
  stopping: AbortController;
  evals: Promise<void>[];
  /** The publish in flight (at most one). */
  publishing: Promise<void>;
  lastPublish: { waitMs: number; syncMs: number };
  /** The version on the engines. */
  version: number;
  /** The trainer's version (ahead by one while a publish waits). */
  trainerVersion: number;
  /** Batches trained by this loop (the throttle's clock). */
  trained: number;
  timing: { producerWaitMs: number; producerBusyMs: number; trainerBusyMs: number };
}

/** Runs `--async-train` until `totalSteps`: a producer and a consumer on a {@link TrajectoryBuffer}. */
export async function asyncLoop(ctx: RunContext): Promise<void> {
  const s = await asyncState(ctx);
  const producer = produce(s, ctx.config.totalSteps - ctx.state.step).catch((err: unknown) => {
    // Once the loop is stopping, the producer's wake-up is not a failure.
    if (!s.stopping.signal.aborted) fail(s, err);
  });
  try {
    while (ctx.state.step < ctx.config.totalSteps && !ctx.stopRequested) await consume(s);
    await s.publishing;
    await Promise.all(s.evals);
    s.stopping.signal.throwIfAborted();
  } finally {
    const failed = s.stopping.signal.aborted;
    s.stopping.abort(new Error('async training stopped'));
    s.buffer.close();
    await producer;
    await Promise.all(s.evals);
    // The first failure is what the caller sees, not the wake-up of a waiting take.
    if (failed) s.stopping.signal.throwIfAborted();
  }
}

async function asyncState(ctx: RunContext): Promise<AsyncState> {
  const { o } = ctx;
  const bound = stalenessBound(o);
  const version = await ctx.roles.trainer.getVersion();
  return {
    ctx,
    stepCtx: shareProgress(ctx, { ...ctx, o: { ...o, evalSteps: 0 } }),
    buffer: new TrajectoryBuffer<BatchMeta>({ queueSize: o.asyncQueueSize }),
    gate: new WeightsGate(),
    // Without --max-head-offpolicyness, η is the bound the queue already implies, and the
    // buffer's slots are what binds.
    throttle: new StalenessThrottle({
      consumerBatchSize: 1,
      maxConcurrentRollouts: o.asyncQueueSize + 1,
      maxHeadOffpolicyness: bound.value,
    }),
    bound,
    stopping: new AbortController(),
    evals: [],
    publishing: Promise.resolve(),
    lastPublish: { waitMs: 0, syncMs: 0 },
    version,
    trainerVersion: version,
    trained: 0,
    timing: { producerWaitMs: 0, producerBusyMs: 0, trainerBusyMs: 0 },
  };
}

function fail(s: AsyncState, err: unknown): void {
  if (!s.stopping.signal.aborted) s.stopping.abort(err);
}

/** The producer: `n` batches into the buffer, each once a slot is free and the throttle admits it. */
async function produce(s: AsyncState, n: number): Promise<void> {
  for (let k = 0; k < n; k++) {
    const w0 = performance.now();
    const slot = await s.buffer.acquire(s.stopping.signal);
    try {
      await s.throttle.admit(s.stopping.signal);
    } catch (err) {
      slot.abort();
      throw err;
    }
    s.timing.producerWaitMs += performance.now() - w0;
    let meta: BatchMeta;
    try {
      meta = await generateBatch(s);
    } catch (err) {
      slot.abort();
      throw err;
    }
    // The batch travels as its group reports; the trajectories stay with the rollouts that put
    // them, and the buffer bounds how many batches run ahead of the trainer.
    slot.commit(meta);
  }
}

/** One batch of groups, on one weight version unless `--partial-rollout`. */
async function generateBatch(s: AsyncState): Promise<BatchMeta> {
  const { ctx } = s;
  const partial = ctx.o.partialRollout;
  const g0 = performance.now();
  if (!partial) await s.gate.read();
  const version = s.version;
  const items = ctx.sampler.next(ctx.o.rolloutBatchSize);
  const position = { ...ctx.sampler.position };
  try {
    const groups = await generate(ctx, items);
    const generateMs = performance.now() - g0;
    s.timing.producerBusyMs += generateMs;
    return { groups, version, generateMs, position };
  } finally {
    if (!partial) s.gate.done();
    s.throttle.finish(true);
  }
}

/** The consumer: takes one batch, trains on it, starts its publish, and logs the step. */
async function consume(s: AsyncState): Promise<void> {
  const { ctx } = s;
  const { o, state } = ctx;
  const w0 = performance.now();
  const lease = await s.buffer.take({ signal: s.stopping.signal });
  if (!lease)
    throw new TrainPpoError('TRAIN_PPO_ASYNC', 'the trajectory buffer closed before the run ended');
  const waitMs = performance.now() - w0;
  const fill = s.buffer.stats().queued + 1;
  const batch = lease.batch.meta;
  // A stop asked for while waiting: the trainer still holds the last finished step.
  if (ctx.stopRequested) return lease.ack();
  const t0 = performance.now();
  account(ctx, batch.groups);
  const { kept, passRate } = filterGroups(batch.groups, o);
  state.step++;
  state.position = batch.position;
  const episodes = recordEpisodes(ctx, batch.groups, s.trainerVersion);
  if (kept.length === 0) {
    lease.ack();
    settleStep(ctx, batch.groups, []);
    releaseBatches(batch.groups);
    ctx.log.line(`step ${state.step}: no group passed (pass rate ${passRate.toFixed(2)}); skipped`);
    await afterStep(s.stepCtx, {
      ...episodes,
      pass_rate: passRate,
      episodes_failed: state.failed,
      generate_s: batch.generateMs / 1000,
    });
    return;
  }
  const trained = await trainKept(ctx, kept);
  const u = trained.u;
  lease.ack();
  settleStep(ctx, batch.groups, trained.kept);
  releaseBatches([...batch.groups, ...trained.kept]);
  if (u.staleMax > s.bound.value) {
    throw new TrainPpoError(
      'TRAIN_PPO_ASYNC',
      `staleness ${u.staleMax} exceeds the bound ${s.bound.value} set by ${s.bound.by}`,
    );
  }
  s.trainerVersion = u.version;
  const previousPublishWaitMs = await startPublish(s, state.step);
  const busy = performance.now() - t0;
  s.timing.trainerBusyMs += busy;
  await afterStep(s.stepCtx, {
    ...episodes,
    ...recordUpdate(ctx, trained.kept, u, passRate),
    ...stepTimes(s, { batch, busy, waitMs, fill, previousPublishWaitMs }),
    samples_per_s: (u.samples * 1000) / Math.max(1, busy + waitMs),
    tokens_per_s: (u.tokens * 1000) / Math.max(1, busy + waitMs),
    version: s.trainerVersion,
  });
}

/**
 * After an update: waits for the previous publish (versions reach the engines in order, at most
 * one waits, which keeps the queue's staleness bound), snapshots the weights while the trainer is
 * idle, has the engines fetch them, and starts their load beside training. Returns how long the
 * previous publish was waited for.
 */
async function startPublish(s: AsyncState, step: number): Promise<number> {
  const p0 = performance.now();
  await s.publishing;
  const waited = performance.now() - p0;
  s.stopping.signal.throwIfAborted();
  // A snapshot now (the trainer is idle), pushed once the engines may change version: the
  // trainer trains the next batch meanwhile instead of waiting for the batch in generation.
  const s0 = performance.now();
  const snapshot = await trainerWeights(s.ctx);
  // The engines fetch it now, while the trainer is idle (weight-sync.ts: stagePolicy).
  await syncWeights(s.ctx, snapshot, 'stage');
  const stageMs = performance.now() - s0;
  s.publishing = publishBeside(s, snapshot, step, stageMs).catch((err: unknown) => fail(s, err));
  return waited;
}

/** Loads the staged `w` on every engine once no batch or evaluation holds their weights. */
async function publishBeside(
  s: AsyncState,
  w: PolicyUpdate,
  step: number,
  stageMs: number,
): Promise<void> {
  const { ctx } = s;
  const p0 = performance.now();
  await s.gate.write();
  const p1 = performance.now();
  try {
    await syncWeights(ctx, w, 'apply');
  } finally {
    s.gate.done();
  }
  s.version = w.version;
  s.lastPublish = { waitMs: p1 - p0, syncMs: stageMs + performance.now() - p1 };
  s.throttle.setVersion(++s.trained);
  const { o } = ctx;
  if (
    o.evalSteps > 0 &&
    step % o.evalSteps === 0 &&
    step < ctx.config.totalSteps &&
    ctx.evalItems.length
  )
    s.evals.push(evaluateBeside(ctx, s.gate, step).catch((err: unknown) => fail(s, err)));
}

/** Where both sides spent their time in this step. */
function stepTimes(
  s: AsyncState,
  t: {
    batch: BatchMeta;
    busy: number;
    waitMs: number;
    fill: number;
    previousPublishWaitMs: number;
  },
): Record<string, number> {
  const wall = performance.now() - s.ctx.started;
  const step = Math.max(1, t.busy + t.waitMs);
  return {
    buffer_fill: t.fill,
    generate_s: t.batch.generateMs / 1000,
    weight_sync_s: s.lastPublish.syncMs / 1000,
    weight_sync_share: s.lastPublish.syncMs / step,
    publish_wait_s: s.lastPublish.waitMs / 1000,
    previous_publish_wait_s: t.previousPublishWaitMs / 1000,
    trainer_wait_s: t.waitMs / 1000,
    producer_wait_s: s.timing.producerWaitMs / 1000,
    rollout_busy_fraction: s.timing.producerBusyMs / wall,
    trainer_busy_fraction: s.timing.trainerBusyMs / wall,
    step_s: (t.busy + t.waitMs) / 1000,
    episodes_per_s: (t.batch.groups.reduce((n, g) => n + g.episodes, 0) * 1000) / step,
  };
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
