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
 * @module
 */
import type { GroupResult } from '../../actors/agent/episode-runner.ts';
import { Semaphore } from '../../actors/agent/semaphore.ts';
import { StalenessThrottle } from '../staleness.ts';
import { account, afterStep, generate, type RunContext } from './run.ts';
import { filterGroups, publishWeights, trainOn } from './step.ts';

interface Batch {
  groups: GroupResult[];
  /** Weight version when generation of this batch started. */
  version: number;
  generateMs: number;
  /** Data position after this batch's prompts: what a checkpoint after training on it records. */
  position: { epoch: number; offset: number };
}

/** Runs `--async-train` until `totalSteps`. */
export async function asyncLoop(ctx: RunContext): Promise<void> {
  const { o, roles, state } = ctx;
  const slots = new Semaphore(o.asyncQueueSize);
  const queue: Batch[] = [];
  let wakeConsumer: (() => void) | undefined;
  // Held while a batch is generated, and by a weight publish (unless --partial-rollout).
  const engineLock = new Semaphore(1);
  let version = (await roles.trainer.weights()).version;
  let stop = false;
  let producerError: unknown;
  const timing = { producerWaitMs: 0, producerBusyMs: 0, trainerWaitMs: 0, trainerBusyMs: 0 };
  const toProduce = ctx.totalSteps - state.step;
  // AReaL's throttle (--max-head-offpolicyness η): batch n may start only once n − η batches are
  // trained, so no token is more than η versions stale, whatever the queue allows.
  const eta = o.maxHeadOffpolicyness;
  const throttle =
    eta === undefined
      ? undefined
      : new StalenessThrottle({ consumerBatchSize: 1, maxConcurrentRollouts: o.asyncQueueSize + 1, maxHeadOffpolicyness: eta });
  let trainedHere = 0;
  const bound = stalenessBound(o);

  const producer = (async () => {
    for (let n = 0; n < toProduce && !stop; n++) {
      const w0 = performance.now();
      await slots.acquire();
      if (!stop) await throttle?.admit();
      timing.producerWaitMs += performance.now() - w0;
      if (stop) break;
      const g0 = performance.now();
      await engineLock.acquire();
      const batchVersion = version;
      let groups: GroupResult[];
      const items = ctx.sampler.next(o.rolloutBatchSize);
      const position = { ...ctx.sampler.position };
      try {
        groups = await generate(ctx, items);
      } finally {
        engineLock.release();
        throttle?.finish(true);
      }
      const ms = performance.now() - g0;
      timing.producerBusyMs += ms;
      queue.push({ groups, version: batchVersion, generateMs: ms, position });
      wakeConsumer?.();
    }
  })().catch((err: unknown) => {
    producerError = err;
    wakeConsumer?.();
  });

  try {
    while (state.step < ctx.totalSteps) {
      const w0 = performance.now();
      while (queue.length === 0 && producerError === undefined) {
        await new Promise<void>((r) => (wakeConsumer = r));
      }
      if (producerError !== undefined) throw producerError;
      const waitMs = performance.now() - w0;
      timing.trainerWaitMs += waitMs;
      const fill = queue.length;
      const batch = queue.shift()!;
      slots.release();
      const t0 = performance.now();
      account(ctx, batch.groups);
      const { kept, passRate } = filterGroups(batch.groups, o);
      state.step++;
      state.position = batch.position;
      if (kept.length === 0) {
        ctx.log.line(`step ${state.step}: no group passed (pass rate ${passRate.toFixed(2)}); skipped`);
        await afterStep(ctx, { pass_rate: passRate, episodes_failed: state.failed, generate_s: batch.generateMs / 1000 });
        continue;
      }
      const u = await trainOn(kept.flatMap((g) => g.trajectories), roles, o, ctx.kl, version);
      if (u.staleMax > bound.value) {
        throw new Error(`staleness ${u.staleMax} exceeds the bound ${bound.value} set by ${bound.by}`);
      }
      const p0 = performance.now();
      if (!o.partialRollout) await engineLock.acquire();
      let sync;
      try {
        sync = await publishWeights(roles);
      } finally {
        if (!o.partialRollout) engineLock.release();
      }
      version = sync.version;
      throttle?.setVersion(++trainedHere);
      const busy = performance.now() - t0;
      timing.trainerBusyMs += busy;
      for (const g of kept) state.trainedPrompts.push(g.index);
      state.position = batch.position;
      state.klCoef = ctx.kl.value;
      ctx.summary.rewardFirst ??= u.rewardMean;
      ctx.summary.rewardLast = u.rewardMean;
      const wall = performance.now() - ctx.started;
      await afterStep(ctx, {
        reward_mean: u.rewardMean,
        kl: u.kl,
        policy_loss: u.policyLoss,
        clip_fraction: u.clipFraction,
        entropy: u.entropy,
        response_length: u.responseLength,
        pass_rate: passRate,
        staleness_mean: u.staleMean,
        staleness_max: u.staleMax,
        buffer_fill: fill,
        generate_s: batch.generateMs / 1000,
        train_s: u.trainMs / 1000,
        experience_s: u.experienceMs / 1000,
        weight_sync_s: (performance.now() - p0) / 1000,
        trainer_wait_s: waitMs / 1000,
        producer_wait_s: timing.producerWaitMs / 1000,
        rollout_busy_fraction: timing.producerBusyMs / wall,
        trainer_busy_fraction: timing.trainerBusyMs / wall,
        samples: u.samples,
      samples_per_s: (u.samples * 1000) / Math.max(1, busy + waitMs),
        tokens_per_s: (u.tokens * 1000) / Math.max(1, busy + waitMs),
        episodes_failed: state.failed,
        rollout_restarts: state.rolloutRestarts,
        version: sync.version,
      });
    }
  } finally {
    stop = true;
    slots.release();
    throttle?.setVersion(Number.MAX_SAFE_INTEGER / 4);
    await producer;
  }
}

/**
 * The most versions a trained token may lag: the queue size (a batch starts only once a slot is
 * free, i.e. once the batch `queueSize` ahead of it was taken), one more when weights may change
 * mid-batch (`--partial-rollout`), and at most η with `--max-head-offpolicyness`.
 */
export function stalenessBound(o: RunContext['o']): { value: number; by: string } {
  const queue = o.asyncQueueSize + (o.partialRollout ? 1 : 0);
  if (o.maxHeadOffpolicyness !== undefined && o.maxHeadOffpolicyness < queue) {
    return { value: o.maxHeadOffpolicyness, by: `--max-head-offpolicyness ${o.maxHeadOffpolicyness}` };
  }
  return { value: queue, by: `--async-queue-size ${o.asyncQueueSize}${o.partialRollout ? ' with --partial-rollout' : ''}` };
}
