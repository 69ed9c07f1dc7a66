/**
 * Where things run: picks a node (or placement-group bundle) for an actor, and reserves all
 * bundles of a placement group at once. Pure decisions over resource pools; the head applies them.
 *
 * @module
 */
import type { PlacementStrategy, ResourceMap, SchedulingStrategy } from '../protocol.ts';
import { type Allocation, ResourcePool, sumResources } from './resources.ts';

/** A node as the scheduler sees it. */
export interface SchedNode {
  readonly nodeId: string;
  readonly pool: ResourcePool;
  alive: boolean;
  /** Actors placed here, for SPREAD. */
  actorCount: number;
}

/** Outcome of a placement attempt. */
export type Placement<T> =
  | { readonly kind: 'placed'; readonly value: T }
  | { readonly kind: 'wait' }
  | { readonly kind: 'infeasible'; readonly reason: string };

const wait = { kind: 'wait' } as const;

function describe(req: ResourceMap): string {
  const parts = Object.entries(req)
    .filter(([, v]) => v > 0)
    .map(([k, v]) => `${k}: ${v}`);
  return `{${parts.join(', ')}}`;
}

function describeNodes(nodes: SchedNode[]): string {
  const alive = nodes.filter((n) => n.alive);
  if (alive.length === 0) return 'no node is alive';
  return alive.map((n) => `${n.nodeId} ${describe(n.pool.total)}`).join('; ');
}

/** Picks a node for `req` under `strategy`. */
export function placeActor(
  nodes: SchedNode[],
  req: ResourceMap,
  strategy: SchedulingStrategy,
): Placement<{ node: SchedNode; alloc: Allocation }> {
  const alive = nodes.filter((n) => n.alive);
  if (typeof strategy === 'object') {
    const target = alive.find((n) => n.nodeId === strategy.nodeId);
    if (target) {
      if (!target.pool.couldEverFit(req)) {
        if (!strategy.soft) {
          return {
            kind: 'infeasible',
            reason: `node ${strategy.nodeId} can never hold ${describe(req)} (it has ${describe(target.pool.total)})`,
          };
        }
      } else {
        const alloc = target.pool.take(req);
        if (alloc) return { kind: 'placed', value: { node: target, alloc } };
        if (!strategy.soft) return wait;
      }
    } else if (!strategy.soft) {
      return { kind: 'infeasible', reason: `node ${strategy.nodeId} is not alive` };
    }
    return placeActor(nodes, req, 'DEFAULT');
  }
  if (!alive.some((n) => n.pool.couldEverFit(req))) {
    return {
      kind: 'infeasible',
      reason: `no node can ever hold ${describe(req)}: ${describeNodes(nodes)}`,
    };
  }
  const fitting = alive.filter((n) => n.pool.canFit(req));
  if (fitting.length === 0) return wait;
  let node = fitting[0]!;
  if (strategy === 'SPREAD') {
    for (const n of fitting) if (n.actorCount < node.actorCount) node = n;
  }
  const alloc = node.pool.take(req)!;
  return { kind: 'placed', value: { node, alloc } };
}

/** Reservation of one bundle. */
export interface BundleReservation {
  readonly node: SchedNode;
  readonly alloc: Allocation;
}

/**
 * Reserves every bundle or none. STRICT_PACK: one node; PACK: as few nodes as possible;
 * STRICT_SPREAD: each bundle on its own node; SPREAD: distinct nodes where it can.
 */
export function reserveBundles(
  nodes: SchedNode[],
  bundles: ResourceMap[],
  strategy: PlacementStrategy,
): Placement<BundleReservation[]> {
  const alive = nodes.filter((n) => n.alive);
  const emptyPools = new Map(alive.map((n) => [n.nodeId, emptied(n.pool)]));
  const everPlan = plan(alive, bundles, strategy, emptyPools);
  if (!everPlan) {
    return {
      kind: 'infeasible',
      reason: `placement group ${strategy} of ${bundles.map(describe).join(', ')} can never fit: ${describeNodes(nodes)}`,
    };
  }
  const nowPools = new Map(alive.map((n) => [n.nodeId, n.pool.clone()]));
  const nowPlan = plan(alive, bundles, strategy, nowPools);
  if (!nowPlan) return wait;
  // Apply the plan to the real pools, in the same order it was computed.
  const out: BundleReservation[] = [];
  for (let i = 0; i < bundles.length; i++) {
    const node = nowPlan[i]!;
    const alloc = node.pool.take(bundles[i]!);
    if (!alloc) {
      for (const r of out) r.node.pool.give(r.alloc);
      return wait;
    }
    out.push({ node, alloc });
  }
  return { kind: 'placed', value: out };
}

function emptied(p: ResourcePool): ResourcePool {
  return new ResourcePool(p.total, [...p.gpuFree.keys()]);
}

/** Node for each bundle in order, computed on scratch pools; undefined when impossible. */
function plan(
  alive: SchedNode[],
  bundles: ResourceMap[],
  strategy: PlacementStrategy,
  pools: Map<string, ResourcePool>,
): SchedNode[] | undefined {
  const tryOn = (n: SchedNode, b: ResourceMap) => pools.get(n.nodeId)!.take(b) !== undefined;
  if (strategy === 'STRICT_PACK' || strategy === 'PACK') {
    const total = sumResources(bundles);
    for (const n of alive) {
      const scratch = pools.get(n.nodeId)!.clone();
      if (scratch.canFit(total) && bundles.every((b) => scratch.take(b))) {
        bundles.forEach((b) => tryOn(n, b));
        return bundles.map(() => n);
      }
    }
    if (strategy === 'STRICT_PACK') return undefined;
    const used: SchedNode[] = [];
    const out: SchedNode[] = [];
    for (const b of bundles) {
      const n = [...used, ...alive.filter((x) => !used.includes(x))].find((x) => tryOn(x, b));
      if (!n) return undefined;
      if (!used.includes(n)) used.push(n);
      out.push(n);
    }
    return out;
  }
  if (strategy === 'STRICT_SPREAD') {
    if (bundles.length > alive.length) return undefined;
    return spreadStrict(alive, bundles, 0, new Set(), pools);
  }
  // SPREAD: prefer a node not yet used by this group, fall back to any that fits.
  const out: SchedNode[] = [];
  for (const b of bundles) {
    const fresh = alive.filter((x) => !out.includes(x));
    const n = fresh.find((x) => tryOn(x, b)) ?? alive.find((x) => tryOn(x, b));
    if (!n) return undefined;
    out.push(n);
  }
  return out;
}

/** Backtracking search: bundle i onward, each on a node not in `taken`. */
function spreadStrict(
  alive: SchedNode[],
  bundles: ResourceMap[],
  i: number,
  taken: Set<string>,
  pools: Map<string, ResourcePool>,
): SchedNode[] | undefined {
  if (i === bundles.length) return [];
  for (const n of alive) {
    if (taken.has(n.nodeId)) continue;
    const pool = pools.get(n.nodeId)!;
    const alloc = pool.take(bundles[i]!);
    if (!alloc) continue;
    taken.add(n.nodeId);
    const rest = spreadStrict(alive, bundles, i + 1, taken, pools);
    if (rest) return [n, ...rest];
    taken.delete(n.nodeId);
    pool.give(alloc);
  }
  return undefined;
}
