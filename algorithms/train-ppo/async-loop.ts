/**
 * The asynchronous off-policy loop (`--async-train`).
 *
 * @module
 */
import type { RunContext } from './run.ts';
import { syncLoop } from './run.ts';

/** Rollout runs ahead of the trainer into a bounded buffer. */
export async function asyncLoop(ctx: RunContext): Promise<void> {
  await syncLoop(ctx);
}
