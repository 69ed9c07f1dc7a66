/**
 * Placement groups at the head: reserving all bundles at once (or waiting for room), waiting for
 * a group, removing it (and killing its actors), and re-reserving the bundles a dead node held.
 *
 * @module
 */
import {
  InfeasibleError,
  InvalidArgumentError,
  NotFoundError,
  PlacementGroupError,
} from '../errors.ts';
import type { CreatePlacementGroup } from '../protocol.ts';
import type { ActorTable } from './actors.ts';
import { ResourcePool } from './resources.ts';
import { type SchedNode, reserveBundles } from './scheduler.ts';
import { type HeadContext, type PgRec, newId } from './state.ts';

/** The head's placement groups. */
export class PlacementGroups {
  /** Groups waiting for resources (new, or re-reserving lost bundles). */
  readonly pending = new Set<PgRec>();

  constructor(
    private readonly ctx: HeadContext,
    private readonly actors: ActorTable,
  ) {}

  create(msg: CreatePlacementGroup, ownerId: string): { pgId: string } {
    const pgId = msg.pgId ?? newId('pg_');
    if (typeof pgId !== 'string' || this.ctx.pgs.has(pgId)) {
      throw new InvalidArgumentError(
        `placement group id '${String(pgId).slice(0, 64)}' is invalid or taken`,
      );
    }
    const pg: PgRec = {
      info: {
        pgId,
        name: msg.name,
        strategy: msg.strategy,
        bundles: msg.bundles,
        state: 'PENDING',
        ownerId,
        detached: msg.detached,
      },
      waiters: [],
    };
    this.ctx.pgs.set(pgId, pg);
    if (this.tryReserve(pg) === 'infeasible') {
      this.save(pg);
      throw new InfeasibleError(pg.failure!);
    }
    this.save(pg);
    return { pgId };
  }

  /** Re-reserves the bundles a dead node held; the others stay where they are. */
  private tryRereserve(pg: PgRec): 'placed' | 'wait' {
    const lost = pg.lostBundles!;
    const kept = new Set(
      pg.reservations!.filter((_, i) => !lost.includes(i)).map((r) => r.node.nodeId),
    );
    // STRICT_SPREAD still means one bundle per node: skip nodes that hold surviving bundles.
    const nodes = this.schedNodes().filter(
      (n) => pg.info.strategy !== 'STRICT_SPREAD' || !kept.has(n.nodeId),
    );
    const r = reserveBundles(
      nodes,
      lost.map((i) => pg.info.bundles[i]!),
      pg.info.strategy,
    );
    if (r.kind !== 'placed') {
      this.pending.add(pg);
      return 'wait';
    }
    this.pending.delete(pg);
    lost.forEach((bundle, j) => {
      const res = r.value[j]!;
      pg.reservations![bundle] = res;
      pg.bundlePools![bundle] = new ResourcePool(pg.info.bundles[bundle]!, res.alloc.gpuIds);
    });
    pg.lostBundles = undefined;
    this.placed(pg);
    return 'placed';
  }

  private tryReserve(pg: PgRec): 'placed' | 'wait' | 'infeasible' {
    if (pg.restoring) return 'wait'; // until its nodes re-register or the recovery window ends
    if (pg.lostBundles) return this.tryRereserve(pg);
    const r = reserveBundles(this.schedNodes(), pg.info.bundles, pg.info.strategy);
    if (r.kind === 'infeasible') {
      pg.info.state = 'FAILED';
      pg.failure = r.reason;
      return 'infeasible';
    }
    if (r.kind === 'wait') {
      this.pending.add(pg);
      return 'wait';
    }
    this.pending.delete(pg);
    pg.reservations = r.value;
    pg.bundlePools = r.value.map(
      (res, i) => new ResourcePool(pg.info.bundles[i]!, res.alloc.gpuIds),
    );
    this.placed(pg);
    return 'placed';
  }

  /** Every bundle has a home: the group is CREATED and its waiters go on. */
  private placed(pg: PgRec): void {
    pg.info.state = 'CREATED';
    pg.info.bundleNodes = pg.reservations!.map((res) => res.node.nodeId);
    pg.info.bundleGpuIds = pg.reservations!.map((res) => [...res.alloc.gpuIds]);
    for (const w of pg.waiters.splice(0)) w.resolve();
    this.ctx.schedulePump();
  }

  private schedNodes(): SchedNode[] {
    return [...this.ctx.nodes.values()].map((n) => n.sched);
  }

  /** Retries every group waiting for resources (called from the head's pump). */
  retryPending(): void {
    for (const pg of [...this.pending]) {
      if (this.tryReserve(pg) === 'placed') this.save(pg);
    }
  }

  wait(pgId: string): Promise<boolean> | boolean {
    const pg = this.ctx.pgs.get(pgId);
    if (!pg) throw new NotFoundError(`no placement group ${pgId}`);
    if (pg.info.state === 'CREATED') return true;
    if (pg.info.state === 'FAILED') throw new InfeasibleError(pg.failure ?? 'infeasible');
    if (pg.info.state === 'REMOVED') {
      throw new PlacementGroupError(`placement group ${pgId} was removed`);
    }
    return new Promise((resolve, reject) =>
      pg.waiters.push({ resolve: () => resolve(true), reject }),
    );
  }

  remove(pgId: string): boolean {
    const pg = this.ctx.pgs.get(pgId);
    if (!pg) throw new NotFoundError(`no placement group ${pgId}`);
    if (pg.info.state === 'REMOVED') return true;
    for (const rec of this.ctx.actors.values()) {
      if (rec.info.options.placementGroupId === pgId && rec.info.state !== 'DEAD') {
        this.actors.kill(rec, true, `its placement group ${pgId} was removed`);
      }
    }
    this.pending.delete(pg);
    for (const r of pg.reservations ?? []) if (r?.node.alive) r.node.pool.give(r.alloc);
    pg.restoring = undefined;
    pg.reservations = undefined;
    pg.info.state = 'REMOVED';
    for (const w of pg.waiters.splice(0))
      w.reject(new PlacementGroupError(`placement group ${pgId} was removed`));
    this.save(pg);
    this.ctx.schedulePump();
    return true;
  }

  /** Removes the non-detached groups `clientId` owns (its connection closed for good). */
  removeOwnedBy(clientId: string): void {
    for (const pg of this.ctx.pgs.values()) {
      if (pg.info.ownerId === clientId && !pg.info.detached && pg.info.state !== 'REMOVED')
        this.remove(pg.info.pgId);
    }
  }

  /** A node died: the bundles it held wait (RESCHEDULING) for a new home. */
  nodeLost(node: SchedNode): void {
    for (const pg of this.ctx.pgs.values()) {
      if ((pg.info.state !== 'CREATED' && pg.info.state !== 'RESCHEDULING') || !pg.reservations)
        continue;
      const lost = pg.reservations.flatMap((r, i) => (r?.node === node ? [i] : []));
      if (lost.length === 0) continue;
      pg.lostBundles = [...new Set([...(pg.lostBundles ?? []), ...lost])];
      pg.info.state = 'RESCHEDULING';
      this.pending.add(pg);
      this.save(pg);
      this.ctx.schedulePump();
    }
  }

  save(pg: PgRec): void {
    if (this.ctx.closing) return;
    this.ctx.store.putPlacementGroup(pg.info);
    this.ctx.events.emit('placementGroup', { ...pg.info });
  }
}
