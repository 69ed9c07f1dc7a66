/**
 * New weights to the engines, by reference: trainer rank 0 `put`s each version once
 * (`Trainer.shareWeights`) and the driver hands the ref on, so the bytes go from the trainer to
 * the engines and never through the driver. The engines on the trainer's node fetch that ref (the
 * runtime writes one shared-memory file for all of them); on any other node one engine fetches it
 * and re-shares its copy (`Rollout.relayWeights`), and the node's other engines fetch that, so
 * the weights cross to each node once, not once per engine.
 *
 * @module
 */
import type { PolicyWeights } from '../../actors/engines/types.ts';
import type { ObjectRef } from '../../runtime/api.ts';
import type { Roles } from './roles.ts';

/** A version of the policy as the engines take it: a ref the trainer owns, or (in-process) the value. */
export interface PolicyUpdate {
  version: number;
  weights: PolicyWeights | ObjectRef<PolicyWeights>;
}

/** Which rollouts fetch from the trainer, and which load through a relay on their own node. */
export interface WeightRoutes {
  direct: number[];
  relays: { via: number; to: number[] }[];
}

/**
 * Routes for rollouts `which`: those on the trainer's node (or on an unknown node, or alone on
 * theirs) fetch from the trainer; on every other node the first of them relays to the rest.
 */
export function weightRoutes(
  trainerNode: string | undefined,
  rolloutNodes: readonly (string | undefined)[],
  which: readonly number[],
): WeightRoutes {
  const direct: number[] = [];
  const byNode = new Map<string, number[]>();
  for (const i of which) {
    const node = rolloutNodes[i];
    if (node === undefined || node === trainerNode) direct.push(i);
    else byNode.set(node, [...(byNode.get(node) ?? []), i]);
  }
  const relays: WeightRoutes['relays'] = [];
  for (const [via, ...to] of byNode.values()) {
    if (to.length === 0) direct.push(via!);
    else relays.push({ via: via!, to });
  }
  return { direct: direct.sort((a, b) => a - b), relays };
}

/** Loads `p` on rollouts `which` (default: all) along {@link weightRoutes}. */
export async function loadPolicy(
  roles: Roles,
  p: PolicyUpdate,
  which: readonly number[] = roles.rollouts.map((_, i) => i),
): Promise<void> {
  const routes = weightRoutes(roles.nodes?.trainer, roles.nodes?.rollouts ?? [], which);
  await Promise.all([
    ...routes.direct.map((i) => roles.rollouts[i]!.updateWeights(p.weights)),
    ...routes.relays.map(async ({ via, to }) => {
      const { weights } = await roles.rollouts[via]!.relayWeights(p.weights);
      await Promise.all(to.map((i) => roles.rollouts[i]!.updateWeights(weights)));
    }),
  ]);
}

/**
 * Has rollouts `which` (default: all) fetch `p` along {@link weightRoutes} without loading it
 * yet ({@link applyPolicy} loads it). The async loop stages each version as soon as it is trained,
 * while the trainer is idle: a trainer busy with the next batch would answer the fetches only when
 * that call ends, and the publish would hold the engines' version gate that long.
 */
export async function stagePolicy(
  roles: Roles,
  p: PolicyUpdate,
  which: readonly number[] = roles.rollouts.map((_, i) => i),
): Promise<void> {
  const routes = weightRoutes(roles.nodes?.trainer, roles.nodes?.rollouts ?? [], which);
  await Promise.all([
    ...routes.direct.map((i) => roles.rollouts[i]!.stageWeights(p.weights)),
    ...routes.relays.map(async ({ via, to }) => {
      const { weights } = await roles.rollouts[via]!.relayWeights(p.weights, 'staged');
      await Promise.all(to.map((i) => roles.rollouts[i]!.stageWeights(weights)));
    }),
  ]);
}

/**
 * Loads the staged `p` on every rollout; one that lost it (restarted since) loads `p` itself,
 * fetching from the trainer.
 */
export async function applyPolicy(roles: Roles, p: PolicyUpdate): Promise<void> {
  const missed: number[] = [];
  await Promise.all(
    roles.rollouts.map(async (r, i) => {
      if (!(await r.loadStaged(p.version))) missed.push(i);
    }),
  );
  if (missed.length > 0) await loadPolicy(roles, p, missed);
}

/**
 * Sends the trainer's current weights to every engine; returns the new version and the time
 * taken (the trainer's export and `put`, the engines' fetch and load).
 */
export async function publishWeights(roles: Roles): Promise<{ version: number; syncMs: number }> {
  const t0 = performance.now();
  const p = await roles.policy();
  await loadPolicy(roles, p);
  return { version: p.version, syncMs: performance.now() - t0 };
}
