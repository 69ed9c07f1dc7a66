/**
 * The synchronous (on-policy, hybrid) loop. One step: generate `rollout_batch_size ×
 * n_samples_per_prompt` episodes across the engines → make experience → train critic and policy
 * → publish weights with a new version to every engine → log. Every token trained on was
 * produced by the current version.
 *
 * @module
 */
import { afterStep, recordUpdate, type RunContext } from './context.ts';
import { account, generate } from './generate.ts';
import { filterGroups, publishWeights, trainOn } from './step.ts';

/** The synchronous (on-policy, hybrid) loop. */
export async function syncLoop(ctx: RunContext): Promise<void> {
  const { o, roles, state } = ctx;
  while (state.step < ctx.totalSteps) {
    const tStep = performance.now();
    if (o.colocateAllModels) await Promise.all(roles.rollouts.map((r) => r.wakeUp()));
    const items = ctx.sampler.next(o.rolloutBatchSize);
    const groups = await generate(ctx, items);
    const genMs = performance.now() - tStep;
    account(ctx, groups);
    if (o.colocateAllModels) await Promise.all(roles.rollouts.map((r) => r.sleep()));
    const { kept, passRate } = filterGroups(groups, o);
    state.step++;
    if (kept.length === 0) {
      // Nothing to train on, but the prompts are consumed: the position and checkpoint move on.
      state.position = { ...ctx.sampler.position };
      ctx.log.line(`step ${state.step}: no group passed (pass rate ${passRate.toFixed(2)}); skipped`);
      await afterStep(ctx, { pass_rate: passRate, episodes_failed: state.failed, generate_s: genMs / 1000 });
      continue;
    }
    const version = await roles.trainer.getVersion();
    const u = await trainOn(kept.flatMap((g) => g.trajectories), roles, o, ctx, version);
    if (o.colocateAllModels) await Promise.all(roles.rollouts.map((r) => r.wakeUp()));
    const sync = await publishWeights(roles);
    const stepMs = performance.now() - tStep;
    state.position = { ...ctx.sampler.position };
    await afterStep(ctx, {
      ...recordUpdate(ctx, kept, u, passRate),
      generate_s: genMs / 1000,
      weight_sync_s: sync.syncMs / 1000,
      step_s: stepMs / 1000,
      samples_per_s: (u.samples * 1000) / stepMs,
      tokens_per_s: (u.tokens * 1000) / stepMs,
      version: sync.version,
    });
  }
}

