/**
 * Head restart: restores actors and placement groups from the session's store, re-attaches the
 * workers that node agents report when they re-register, and, when the recovery window (the node
 * heartbeat timeout) ends, gives up on what nobody claimed.
 *
 * @module
 */
import { guarded, logger } from '../log.ts';
import type { RegisterNode } from '../protocol.ts';
import type { Connection } from '../transport.ts';
import type { ActorTable } from './actors.ts';
import type { PlacementGroups } from './placement-groups.ts';
import { ResourcePool, fitsIn } from './resources.ts';
import type { BundleReservation } from './scheduler.ts';
import type { ActorRec, HeadContext, PgRec } from './state.ts';

const log = logger('head');

/** The head's recovery after a restart on the same session. */
export class Recovery {
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly ctx: HeadContext,
    private readonly actors: ActorTable,
    private readonly pgs: PlacementGroups,
  ) {}

  /**
   * Restores actors (and their constructor arguments) from the session's store. Actors that were
   * placed may still run: they keep their state and address, and wait for their node agent to
   * re-register and list them. After the recovery window (the node heartbeat timeout) those not
   * claimed count as lost with their node, and non-detached actors whose owner did not reconnect
   * are killed, as if the owner had exited.
   */
  recover(): void {
    if (!this.ctx.sessionDir) return;
    const stored = this.ctx.store.listActors();
    const pgs = this.recoverPlacementGroups();
    if (stored.length === 0 && pgs === 0) return;
    for (const info of stored) {
      const rec: ActorRec = {
        info: { ...info },
        ctorArgs: this.ctx.store.actorCtorArgs(info.actorId) ?? new Uint8Array(),
        waiters: [],
      };
      this.ctx.actors.set(info.actorId, rec);
      if (info.state === 'DEAD') {
        this.actors.noteDead(rec);
        continue;
      }
      this.actors.noteName(rec);
      if (info.incarnation > 0 && info.nodeId) this.actors.recovering.add(rec);
      else this.actors.pending.add(rec);
    }
    log.info(
      `recovered ${stored.length} actors and ${pgs} placement groups from ${this.ctx.sessionDir}; ` +
        `${this.actors.recovering.size} actors wait for their node`,
    );
    this.timer = setTimeout(
      () => guarded(log, 'ending recovery', () => this.endRecovery()),
      this.ctx.opts.nodeHeartbeatTimeoutMs,
    );
    this.timer.unref();
  }

  /** Stops the recovery timer (head closing). */
  close(): void {
    if (this.timer) clearTimeout(this.timer);
  }

  /**
   * Restores the live placement groups of the store. A group whose bundles were reserved waits
   * (RESCHEDULING) for each bundle's node to re-register, and gets the same resources and GPU
   * indices there; a group still pending is reserved afresh. Returns how many are live.
   */
  private recoverPlacementGroups(): number {
    let live = 0;
    for (const info of this.ctx.store.listPlacementGroups()) {
      const pg: PgRec = { info: { ...info }, waiters: [] };
      this.ctx.pgs.set(info.pgId, pg);
      if (info.state === 'REMOVED' || info.state === 'FAILED') continue;
      live++;
      const n = info.bundles.length;
      if (
        info.bundleNodes?.length === n &&
        (info.state === 'CREATED' || info.state === 'RESCHEDULING')
      ) {
        pg.reservations = new Array<BundleReservation>(n);
        pg.bundlePools = new Array<ResourcePool>(n);
        pg.restoring = new Set(info.bundles.keys());
        pg.info.state = 'RESCHEDULING';
      } else {
        pg.info.state = 'PENDING';
        pg.info.bundleNodes = undefined;
        pg.info.bundleGpuIds = undefined;
        this.pgs.pending.add(pg);
      }
    }
    return live;
  }

  /** A node re-registered after a head restart: its restored bundles take their place again. */
  restoreBundles(nodeId: string): void {
    const node = this.ctx.nodes.get(nodeId)!;
    for (const pg of this.ctx.pgs.values()) {
      if (!pg.restoring) continue;
      for (const i of [...pg.restoring]) {
        if (pg.info.bundleNodes![i] !== nodeId) continue;
        const bundle = pg.info.bundles[i]!;
        const gpuIds = pg.info.bundleGpuIds?.[i] ?? [];
        pg.reservations![i] = {
          node: node.sched,
          alloc: node.sched.pool.takeExact(bundle, gpuIds),
        };
        pg.bundlePools![i] = new ResourcePool(bundle, gpuIds);
        pg.restoring.delete(i);
      }
      if (pg.restoring.size > 0) continue;
      pg.restoring = undefined;
      pg.info.state = 'CREATED';
      this.pgs.save(pg);
      for (const w of pg.waiters.splice(0)) w.resolve();
      log.info(
        `placement group ${pg.info.pgId} restored with its ${pg.info.bundles.length} bundles`,
      );
    }
  }

  /** The bundle a re-attached actor of a placement group runs in (its own, or any on its node). */
  private bundleOf(rec: ActorRec, nodeId: string): { pg: PgRec; index: number } | undefined {
    const pg = this.ctx.pgs.get(rec.info.options.placementGroupId!);
    if (!pg?.bundlePools) return undefined;
    const want = rec.info.options.bundleIndex;
    const ids = rec.info.gpuIds ?? [];
    const index = pg.info.bundles.findIndex(
      (_, i) =>
        (want < 0 || want === i) &&
        pg.info.bundleNodes?.[i] === nodeId &&
        pg.bundlePools![i] !== undefined &&
        fitsIn(rec.info.options.resources, pg.bundlePools![i]!.available) &&
        ids.every((id) => pg.bundlePools![i]!.gpuFree.has(id)),
    );
    return index < 0 ? undefined : { pg, index };
  }

  /**
   * A node re-registered listing the workers it still runs: the incarnations this head expects
   * there take their resources again; every other one is told to stop.
   */
  reattachWorkers(nodeId: string, workers: RegisterNode['workers'], conn: Connection): void {
    const node = this.ctx.nodes.get(nodeId)!;
    for (const w of workers ?? []) {
      const rec = this.ctx.actors.get(w.actorId);
      if (
        rec &&
        this.actors.recovering.has(rec) &&
        rec.info.nodeId === nodeId &&
        rec.info.incarnation === w.incarnation
      ) {
        this.actors.recovering.delete(rec);
        if (rec.info.options.placementGroupId === undefined) {
          const alloc = node.sched.pool.takeExact(
            rec.info.options.resources,
            rec.info.gpuIds ?? [],
          );
          rec.alloc = { node: node.sched, pool: node.sched.pool, alloc };
          node.sched.actorCount++;
        } else {
          const b = this.bundleOf(rec, nodeId);
          if (b) {
            const pool = b.pg.bundlePools![b.index]!;
            rec.alloc = {
              node: node.sched,
              pool,
              alloc: pool.takeExact(rec.info.options.resources, rec.info.gpuIds ?? []),
            };
            node.sched.actorCount++;
          }
        }
        log.info(`actor ${w.actorId} (pid ${w.pid}) re-attached on node ${nodeId}`);
        continue;
      }
      // Not an incarnation this head expects to run there: stop it.
      conn.send({ type: 'stopWorker', actorId: w.actorId, incarnation: w.incarnation });
    }
  }

  private endRecovery(): void {
    this.timer = undefined;
    if (this.ctx.closing) return;
    for (const rec of [...this.actors.recovering]) {
      this.actors.processGone(rec, {
        reason: 'node-died',
        message: `actor ${rec.info.actorId}: its node ${rec.info.nodeId ?? '?'} did not report it after the head restarted`,
      });
    }
    // Bundles whose node did not come back are lost with it: re-reserve them elsewhere.
    for (const pg of this.ctx.pgs.values()) {
      if (!pg.restoring) continue;
      pg.lostBundles = [...new Set([...(pg.lostBundles ?? []), ...pg.restoring])];
      pg.restoring = undefined;
      this.pgs.pending.add(pg);
    }
    for (const rec of this.ctx.actors.values()) {
      if (
        rec.info.state === 'DEAD' ||
        rec.info.options.detached ||
        this.ctx.clients.has(rec.info.ownerId)
      )
        continue;
      this.actors.kill(
        rec,
        true,
        `its owner ${rec.info.ownerId} did not reconnect after the head restarted`,
        'owner-died',
      );
    }
    for (const pg of this.ctx.pgs.values()) {
      if (pg.info.state === 'REMOVED' || pg.info.detached || this.ctx.clients.has(pg.info.ownerId))
        continue;
      this.pgs.remove(pg.info.pgId);
    }
    this.ctx.schedulePump();
  }
}
