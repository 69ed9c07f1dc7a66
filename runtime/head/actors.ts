/**
 * Actor lifecycle at the head: creation, placement (a node or a placement-group bundle), the
 * worker's hello and ready reports, restarts after a worker exits (PENDING → ALIVE ⇄ RESTARTING
 * → DEAD), kills, and `waitActor` long polls. Every state change is written to the store before
 * it is emitted and before waiters hear of it.
 *
 * @module
 */
import {
  InfeasibleError,
  NameTakenError,
  NotFoundError,
  PlacementGroupError,
  InvalidArgumentError,
  type WireError,
  fromWire,
} from '../errors.ts';
import { logger } from '../log.ts';
import type {
  ActorInfo,
  ActorLocation,
  ActorState,
  CreateActor,
  DeathCause,
  WaitActor,
  WorkerAssignment,
  WorkerExited,
} from '../protocol.ts';
import { placeActor } from './scheduler.ts';
import type { ActorAlloc, ActorRec, HeadContext } from './state.ts';

const log = logger('head');

/** The head's actors. */
export class ActorTable {
  /** Actors waiting for resources (or for their placement group). */
  readonly pending = new Set<ActorRec>();
  /**
   * Head restart: actors restored from the store that may still run on their node, until the node
   * re-registers and lists them (or the recovery window ends and they count as lost).
   */
  readonly recovering = new Set<ActorRec>();

  /** Live actors by name (a name is unique among live actors). */
  private readonly names = new Map<string, ActorRec>();
  /** Dead actors in the order they died, with when, for retention. */
  private readonly dead = new Map<string, number>();

  constructor(private readonly ctx: HeadContext) {}

  /** Indexes a live actor's name (create, recovery). */
  noteName(rec: ActorRec): void {
    if (rec.info.name !== undefined) this.names.set(rec.info.name, rec);
  }

  /** Records a death for retention (recovery loads dead actors through here too). */
  noteDead(rec: ActorRec): void {
    if (rec.info.name !== undefined && this.names.get(rec.info.name) === rec)
      this.names.delete(rec.info.name);
    this.dead.delete(rec.info.actorId);
    this.dead.set(rec.info.actorId, Date.now());
  }

  /**
   * Forgets dead actors beyond `maxDeadActors` (oldest first) or older than `deadActorTtlMs`,
   * in memory and in the store. One whose resources are not back yet (its exit report is due)
   * is kept until they are. Returns how many were forgotten.
   */
  pruneDead(): number {
    const { maxDeadActors, deadActorTtlMs } = this.ctx.opts;
    const tooOld = Date.now() - deadActorTtlMs;
    let excess = this.dead.size - maxDeadActors;
    let pruned = 0;
    for (const [actorId, diedAtMs] of this.dead) {
      if (excess <= 0 && diedAtMs > tooOld) break;
      const rec = this.ctx.actors.get(actorId);
      if (rec?.alloc) continue;
      this.dead.delete(actorId);
      this.ctx.actors.delete(actorId);
      this.ctx.store.deleteActor(actorId);
      excess--;
      pruned++;
    }
    return pruned;
  }

  get(actorId: string): ActorRec | undefined {
    return this.ctx.actors.get(actorId);
  }

  info(actorId: string): ActorInfo {
    const rec = this.ctx.actors.get(actorId);
    if (!rec) throw new NotFoundError(`no actor ${actorId}`, { context: { actorId } });
    return { ...rec.info };
  }

  byName(name: string): ActorInfo {
    const rec = this.names.get(name);
    if (!rec || rec.info.state === 'DEAD') throw new NotFoundError(`no live actor named '${name}'`);
    return { ...rec.info };
  }

  list(): ActorInfo[] {
    return [...this.ctx.actors.values()].map((a) => ({ ...a.info }));
  }

  create(msg: CreateActor, ownerId: string): { actorId: string } {
    const o = msg.options;
    const holder = o.name === undefined ? undefined : this.names.get(o.name);
    if (holder && holder.info.state !== 'DEAD') {
      throw new NameTakenError(
        `an actor named '${o.name}' already exists (${holder.info.actorId})`,
      );
    }
    if (o.placementGroupId !== undefined && !this.ctx.pgs.has(o.placementGroupId)) {
      throw new PlacementGroupError(`no placement group ${o.placementGroupId}`);
    }
    const actorId = msg.actorId;
    if (
      typeof actorId !== 'string' ||
      actorId.length < 8 ||
      actorId.length > 64 ||
      this.ctx.actors.has(actorId)
    ) {
      throw new InvalidArgumentError(
        `actor id '${String(actorId).slice(0, 64)}' is invalid or taken`,
      );
    }
    const rec: ActorRec = {
      info: {
        actorId,
        name: o.name,
        state: 'PENDING',
        spec: msg.spec,
        options: o,
        incarnation: 0,
        numRestarts: 0,
        ownerId,
        createdAtMs: Date.now(),
      },
      ctorArgs: msg.ctorArgs,
      waiters: [],
    };
    // Stored first: a write that fails leaves nothing half-created in memory.
    this.ctx.store.putActor(rec.info, msg.ctorArgs);
    this.ctx.actors.set(actorId, rec);
    this.noteName(rec);
    this.ctx.events.emit('actor', { ...rec.info });
    const verdict = this.schedule(rec);
    if (verdict.kind === 'infeasible') {
      // Kept as DEAD so `actorInfo` explains it; the creator's first call fails with this.
      this.setDead(rec, { reason: 'infeasible', message: verdict.reason });
      throw new InfeasibleError(verdict.reason, { context: { actorId } });
    }
    return { actorId };
  }

  /** Places the actor and starts its worker, or queues it; never throws. */
  schedule(rec: ActorRec): { kind: 'placed' | 'wait' } | { kind: 'infeasible'; reason: string } {
    const o = rec.info.options;
    let placed: ActorAlloc | undefined;
    if (o.placementGroupId !== undefined) {
      const pg = this.ctx.pgs.get(o.placementGroupId);
      if (!pg || pg.info.state === 'REMOVED' || pg.info.state === 'FAILED') {
        return { kind: 'infeasible', reason: `placement group ${o.placementGroupId} was removed` };
      }
      if (pg.info.state !== 'CREATED') {
        this.pending.add(rec);
        return { kind: 'wait' };
      }
      const idx = o.bundleIndex;
      if (idx >= pg.bundlePools!.length) {
        return {
          kind: 'infeasible',
          reason: `bundle index ${idx} out of range (${pg.bundlePools!.length} bundles)`,
        };
      }
      const candidates = idx >= 0 ? [idx] : pg.bundlePools!.map((_, i) => i);
      if (!candidates.some((i) => pg.bundlePools![i]!.couldEverFit(o.resources))) {
        return {
          kind: 'infeasible',
          reason: `no bundle of placement group ${pg.info.pgId} can hold the actor's resources`,
        };
      }
      for (const i of candidates) {
        const pool = pg.bundlePools![i]!;
        const alloc = pool.take(o.resources);
        if (alloc) {
          placed = { node: pg.reservations![i]!.node, pool, alloc };
          break;
        }
      }
    } else {
      const p = placeActor(
        [...this.ctx.nodes.values()].map((n) => n.sched),
        o.resources,
        o.schedulingStrategy,
      );
      if (p.kind === 'infeasible') {
        if (rec.info.incarnation === 0) return p;
        log.warn(`actor ${rec.info.actorId} cannot be restarted now: ${p.reason}`);
      } else if (p.kind === 'placed') {
        placed = { node: p.value.node, pool: p.value.node.pool, alloc: p.value.alloc };
      }
    }
    if (!placed) {
      this.pending.add(rec);
      return { kind: 'wait' };
    }
    this.pending.delete(rec);
    rec.alloc = placed;
    placed.node.actorCount++;
    rec.info.incarnation++;
    rec.info.nodeId = placed.node.nodeId;
    rec.info.gpuIds = placed.alloc.gpuIds;
    const node = this.ctx.nodes.get(placed.node.nodeId)!;
    node.conn.send({
      type: 'startWorker',
      actorId: rec.info.actorId,
      incarnation: rec.info.incarnation,
      gpuIds: placed.alloc.gpuIds,
      env: o.env ?? {},
    });
    if (this.ctx.actors.has(rec.info.actorId)) this.save(rec);
    return { kind: 'placed' };
  }

  /** Retries every actor waiting for resources (called from the head's pump). */
  retryPending(): void {
    for (const rec of [...this.pending]) {
      if (rec.info.state === 'DEAD') {
        this.pending.delete(rec);
        continue;
      }
      const v = this.schedule(rec);
      if (v.kind === 'infeasible') this.setDead(rec, { reason: 'infeasible', message: v.reason });
    }
  }

  private release(rec: ActorRec): void {
    const a = rec.alloc;
    if (!a) return;
    rec.alloc = undefined;
    a.pool.give(a.alloc);
    if (!a.uncounted) a.node.actorCount--;
    this.ctx.schedulePump();
  }

  workerHello(actorId: string, incarnation: number): WorkerAssignment {
    const rec = this.ctx.actors.get(actorId);
    if (!rec || rec.info.incarnation !== incarnation || rec.info.state === 'DEAD') {
      throw new NotFoundError(`actor ${actorId} incarnation ${incarnation} is not expected`);
    }
    return { spec: rec.info.spec, options: rec.info.options, ctorArgs: rec.ctorArgs };
  }

  actorReady(actorId: string, incarnation: number, address: string, pid: number): boolean {
    const rec = this.ctx.actors.get(actorId);
    if (!rec || rec.info.incarnation !== incarnation || rec.info.state === 'DEAD') {
      throw new NotFoundError(`actor ${actorId} incarnation ${incarnation} is not expected`);
    }
    rec.info.state = 'ALIVE';
    rec.info.address = address;
    rec.info.pid = pid;
    this.save(rec);
    return true;
  }

  /**
   * A worker asks whether it is still the actor's current incarnation. Its lease is half the
   * node heartbeat timeout: a worker cut off from the head stops serving calls before the head
   * can declare its node dead and start another incarnation (fencing).
   */
  renewLease(actorId: string, incarnation: number): { leaseMs: number } {
    const rec = this.ctx.actors.get(actorId);
    if (!rec || rec.info.incarnation !== incarnation || rec.info.state === 'DEAD') {
      throw new NotFoundError(
        `actor ${actorId} incarnation ${incarnation} was replaced or killed`,
        {
          context: { actorId },
        },
      );
    }
    return { leaseMs: Math.floor(this.ctx.opts.nodeHeartbeatTimeoutMs / 2) };
  }

  actorLoadFailed(actorId: string, incarnation: number, error: WireError): boolean {
    const rec = this.ctx.actors.get(actorId);
    if (!rec || rec.info.incarnation !== incarnation || rec.info.state === 'DEAD') return false;
    const err = fromWire(error);
    this.setDead(rec, { reason: 'load-failed', message: err.message, error });
    return true;
  }

  workerExited(msg: WorkerExited): void {
    const rec = this.ctx.actors.get(msg.actorId);
    if (!rec || rec.info.incarnation !== msg.incarnation) return;
    const how = msg.signal ? `signal ${msg.signal}` : `exit code ${msg.exitCode}`;
    if (rec.info.state === 'DEAD') {
      this.release(rec);
      return;
    }
    const killed = rec.killIntent !== undefined;
    const mem = msg.memory;
    if (mem && !killed) {
      const mib = (n: number) => `${Math.round(n / 2 ** 20)} MiB`;
      this.processGone(rec, {
        reason: 'out-of-memory',
        message: `the memory monitor of node ${mem.nodeId} killed the worker of actor ${rec.info.actorId} (pid ${mem.pid}, ${mem.rssBytes === null ? 'rss unknown' : `rss ${mib(mem.rssBytes)}`}): memory in use ${mib(mem.usedBytes)} of ${mib(mem.totalBytes)} passed the threshold ${mem.threshold}`,
        exitCode: msg.exitCode,
        signal: msg.signal,
        stderrTail: msg.stderrTail,
        memory: mem,
      });
      return;
    }
    // A worker that exited while the head was down restarts as any crashed worker would.
    this.processGone(rec, {
      reason: killed ? 'killed' : 'exited',
      message: killed
        ? `actor ${rec.info.actorId} was killed (${how})`
        : `the worker process of actor ${rec.info.actorId} died (${how})`,
      exitCode: msg.exitCode,
      signal: msg.signal,
      stderrTail: msg.stderrTail,
    });
  }

  /** The actor's process is gone: restart it if allowed, else it is DEAD. */
  processGone(rec: ActorRec, cause: DeathCause): void {
    this.recovering.delete(rec);
    this.release(rec);
    this.stopStale(rec);
    rec.lastDeath = { ...cause, incarnation: rec.info.incarnation };
    const { maxRestarts } = rec.info.options;
    const restartsLeft = maxRestarts === -1 || rec.info.numRestarts < maxRestarts;
    if (rec.killIntent === 'noRestart' || !restartsLeft || this.ctx.closing) {
      this.setDead(rec, cause);
      return;
    }
    rec.killIntent = undefined;
    rec.info.numRestarts++;
    rec.info.state = 'RESTARTING';
    rec.info.address = undefined;
    rec.info.pid = undefined;
    this.save(rec);
    this.schedule(rec);
  }

  /**
   * Kills an actor by id; with `noRestart: false` it restarts if its `maxRestarts` allows. `why`
   * becomes its death cause (`killed from the dashboard`, `its job ended`); a kill() call from a
   * client says whether the actor's owner made it.
   */
  killById(actorId: string, noRestart: boolean, why: string | { byClient: string }): void {
    const rec = this.ctx.actors.get(actorId);
    if (!rec) throw new NotFoundError(`no actor ${actorId}`, { context: { actorId } });
    const cause =
      typeof why === 'string'
        ? why
        : why.byClient === rec.info.ownerId
          ? "killed by its owner's kill() call"
          : `killed by a kill() call from client ${why.byClient}`;
    this.kill(rec, noRestart, cause);
  }

  kill(
    rec: ActorRec,
    noRestart: boolean,
    why: string,
    reason: DeathCause['reason'] = 'killed',
  ): void {
    if (rec.info.state === 'DEAD') return;
    rec.killIntent = noRestart ? 'noRestart' : 'restart';
    if (rec.alloc) {
      const node = this.ctx.nodes.get(rec.alloc.node.nodeId);
      if (reason === 'owner-died')
        rec.lastDeath = { reason, message: why, incarnation: rec.info.incarnation };
      node?.conn.send({
        type: 'stopWorker',
        actorId: rec.info.actorId,
        incarnation: rec.info.incarnation,
      });
      if (reason === 'owner-died' || noRestart) {
        // Mark it dead now so callers fail fast; the exit report only releases resources.
        this.setDead(rec, { reason, message: `actor ${rec.info.actorId}: ${why}` }, false);
      }
    } else if (noRestart) {
      this.setDead(rec, { reason, message: `actor ${rec.info.actorId}: ${why}` });
    }
  }

  /** Kills the non-detached actors `clientId` owns (its connection closed for good). */
  killOwnedBy(clientId: string, why: string): void {
    for (const rec of this.ctx.actors.values()) {
      if (rec.info.ownerId !== clientId || rec.info.options.detached || rec.info.state === 'DEAD')
        continue;
      this.kill(rec, true, why, 'owner-died');
    }
  }

  /**
   * Tells a worker whose node was declared dead to exit itself: its node agent may only be
   * silent, and callers must not keep talking to an incarnation the head has replaced.
   */
  private stopStale(rec: ActorRec): void {
    const conn = this.ctx.workerConns.get(`${rec.info.actorId}:${rec.info.incarnation}`);
    conn?.send({
      type: 'stopWorker',
      actorId: rec.info.actorId,
      incarnation: rec.info.incarnation,
    });
  }

  setDead(rec: ActorRec, cause: DeathCause, releaseNow = true): void {
    this.pending.delete(rec);
    this.recovering.delete(rec);
    this.stopStale(rec);
    if (releaseNow) this.release(rec);
    else if (rec.alloc && !rec.alloc.uncounted) {
      // Resources come back with the exit report, but SPREAD should stop counting it now.
      rec.alloc.uncounted = true;
      rec.alloc.node.actorCount--;
    }
    rec.info.state = 'DEAD';
    rec.info.deathCause = cause;
    rec.info.address = undefined;
    this.save(rec);
    this.noteDead(rec);
    if (this.dead.size > this.ctx.opts.maxDeadActors) this.pruneDead();
  }

  private save(rec: ActorRec): void {
    if (this.ctx.closing) return;
    this.ctx.store.putActor(rec.info);
    this.ctx.events.emit('actor', { ...rec.info });
    this.notify(rec);
  }

  private location(rec: ActorRec): ActorLocation {
    return {
      state: rec.info.state,
      address: rec.info.address,
      incarnation: rec.info.incarnation,
      deathCause: rec.info.deathCause,
      lastDeath: rec.lastDeath,
    };
  }

  private ready(rec: ActorRec, after: number, untilAlive: boolean): boolean {
    const s: ActorState = rec.info.state;
    if (s === 'DEAD') return true;
    if (s === 'ALIVE' && rec.info.incarnation > after) return true;
    return !untilAlive && after > 0 && (rec.lastDeath?.incarnation ?? 0) >= after;
  }

  private notify(rec: ActorRec): void {
    if (rec.waiters.length === 0) return;
    const keep: ActorRec['waiters'] = [];
    for (const w of rec.waiters) {
      if (this.ready(rec, w.afterIncarnation, w.untilAlive)) w.resolve(this.location(rec));
      else keep.push(w);
    }
    rec.waiters = keep;
  }

  wait(msg: WaitActor): ActorLocation | Promise<ActorLocation> {
    const rec = this.ctx.actors.get(msg.actorId);
    if (!rec)
      throw new NotFoundError(`no actor ${msg.actorId}`, { context: { actorId: msg.actorId } });
    if (this.ready(rec, msg.afterIncarnation, msg.untilAlive)) return this.location(rec);
    return new Promise((resolve) =>
      rec.waiters.push({
        afterIncarnation: msg.afterIncarnation,
        untilAlive: msg.untilAlive,
        resolve,
      }),
    );
  }
}
