/**
 * `npm run chaos`: every scenario of the chaos suite at full length, a table of counts in the
 * bench README's style, and exit 1 on any loss, hang, zombie execution, reordering, duplicate
 * at-most-once call, stale on-policy step, weights that crossed to a node other than once or
 * landed with other bits than the trainer's, or a scenario that could not run here (a missing
 * capability is a failure, never a pass). `CHAOS_SECONDS` scales the runtime scenarios (default
 * 30 each), `CHAOS_STEPS` the RL ones (default 12 train_ppo steps), `CHAOS_ONLY=rollout,trainer`
 * runs the scenarios whose name contains one of those texts, `CHAOS_SEED` fixes the RL faults' timing.
 */
import {
  type ChaosResult,
  emptyResult,
  headRestarts,
  linkCut,
  nodeKills,
  report,
  violations,
  workerKills,
} from './harness.ts';
import { engineServerHangs, engineServerKills, rolloutKills, trainerKill } from './rl.ts';
import { weightsOverNetns } from './weights.ts';

const seconds = Number(process.env.CHAOS_SECONDS ?? 30);
const steps = Number(process.env.CHAOS_STEPS ?? 12);
const all: [string, () => Promise<ChaosResult>][] = [
  ['worker kill -9', () => workerKills(seconds, 1000, 6)],
  ['node agent kill -9', () => nodeKills(seconds)],
  ['head restart', () => headRestarts(seconds)],
  ['link cut 20s (netns)', () => linkCut(Math.max(seconds, 60), 20)],
  ['weights by ref (netns)', () => weightsOverNetns()],
  ['rollout kill -9 (sync)', () => rolloutKills(steps, 4)],
  ['rollout kill -9 (async)', () => rolloutKills(steps, 4, { async: true })],
  ['trainer kill -9 + resume (sync)', () => trainerKill(steps)],
  ['trainer kill -9 + resume (async)', () => trainerKill(steps, { async: true })],
  ['engine server kill -9', () => engineServerKills(steps, 3)],
  ['engine server SIGSTOP', () => engineServerHangs(steps, 1, 20)],
];
const only = process.env.CHAOS_ONLY?.split(',').filter(Boolean);
const scenarios = only ? all.filter(([name]) => only.some((o) => name.includes(o))) : all;
const results: ChaosResult[] = [];
for (const [name, run] of scenarios) {
  // A scenario that throws is a failed scenario with its reason, and the others still run.
  results.push(
    await run().catch((e: unknown) => ({
      ...emptyResult(name),
      error: (e as Error).message.slice(0, 300),
    })),
  );
}
console.log(report(results));
const bad = results.filter((r) => violations(r).length > 0);
console.log(
  bad.length === 0 ? 'chaos: every scenario held' : `chaos: ${bad.length} scenario(s) failed`,
);
process.exit(bad.length === 0 ? 0 : 1);
