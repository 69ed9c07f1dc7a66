/**
 * The head: the control plane. It registers nodes and clients, schedules actors and placement
 * groups, tracks actor state (PENDING → ALIVE ⇄ RESTARTING → DEAD), restarts actors whose
 * process died, and kills the non-detached actors of a driver that went away. Calls never pass
 * through it.
 *
 * Other parts (HTTP API, dashboard, job supervisor) attach through the returned `Head`: its
 * events (`actor`, `node`, `placementGroup`, `client`), list methods, `killActor`, and `store`.
 *
 * @module
 */
import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import {
  InfeasibleError,
  InvalidArgumentError,
  NameTakenError,
  NotFoundError,
  PlacementGroupError,
  ProtocolError,
  type WireError,
  fromWire,
} from '../errors.ts';
import { logger } from '../log.ts';
import type {
  ActorInfo,
  ActorLocation,
  ActorState,
  CreateActor,
  CreatePlacementGroup,
  DeathCause,
  HeadRequest,
  Message,
  NodeInfo,
  PlacementGroupInfo,
  RegisterNode,
  WaitActor,
  WorkerAssignment,
  WorkerExited,
  WorkerLog,
  WorkerStats,
} from '../protocol.ts';
import { type Sender, acceptedBy, sendersOf } from '../protocol.ts';
import { type Connection, type Server, listen } from '../transport.ts';
import { type Allocation, ResourcePool, fitsIn } from './resources.ts';
import { type BundleReservation, type SchedNode, placeActor, reserveBundles } from './scheduler.ts';
import { archivePath, isPackageHash, packagesDir, packDir } from './jobs/working-dir.ts';
import { HeadStore } from './store.ts';
import { checkCreateActor, checkCreatePlacementGroup, checkResources } from './validate.ts';

const log = logger('head');

/** Options for `startHead`. */
export interface HeadOptions {
  /** Interface to bind; anything but loopback exposes the cluster. @default '127.0.0.1' */
  host?: string;
  /** WebSocket port; 0 picks a free one. @default 6380 */
  port?: number;
  /** Cluster token every connection must present. @default a fresh random token */
  token?: string;
  /** Directory for `head.sqlite` and logs; omitted means an in-memory store. */
  sessionDir?: string;
  /** A node silent this long is declared dead and its actors rescheduled. @default 10000 */
  nodeHeartbeatTimeoutMs?: number;
  /** How often connections are pinged. @default 1000 */
  heartbeatIntervalMs?: number;
  /** Largest frame the head accepts. @default 64 MiB */
  maxFrameBytes?: number;
  /**
   * Whether the head's sockets keep the process alive; false for a head that `init()` starts
   * inside a driver, so the driver exits when its script is done. @default true
   */
  holdProcess?: boolean;
}

export const headDefaults = {
  host: '127.0.0.1',
  port: 6380,
  nodeHeartbeatTimeoutMs: 10_000,
  heartbeatIntervalMs: 1000,
  maxFrameBytes: 64 * 1024 * 1024,
} as const;

/** A client (driver or worker) connection as the head reports it. */
export interface ClientEvent {
  readonly clientId: string;
  readonly kind: 'driver' | 'worker';
  readonly jobId?: string;
  readonly event: 'connected' | 'disconnected';
}

/** Worker output shipped by a remote node agent (`workerLog`), with the node it came from. */
export type WorkerLogEvent = Omit<WorkerLog, 'type'> & { readonly nodeId: string };

export interface HeadEvents {
  actor: [ActorInfo];
  /** Stored by whoever keeps logs (the operations layer); the head itself keeps none. */
  workerLog: [WorkerLogEvent];
  node: [NodeInfo];
  placementGroup: [PlacementGroupInfo];
  client: [ClientEvent];
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

interface ActorRec {
  info: Mutable<ActorInfo>;
  ctorArgs: Uint8Array;
  alloc?: { node: SchedNode; pool: ResourcePool; alloc: Allocation; uncounted?: boolean };
  waiters: { afterIncarnation: number; untilAlive: boolean; resolve(l: ActorLocation): void }[];
  killIntent?: 'noRestart' | 'restart';
  lastDeath?: DeathCause & { incarnation: number };
}
interface NodeRec {
  info: Mutable<NodeInfo>;
  conn: Connection;
  sched: SchedNode;
}
interface PgRec {
  info: Mutable<PlacementGroupInfo>;
  reservations?: BundleReservation[];
  bundlePools?: ResourcePool[];
  waiters: { resolve(): void; reject(e: Error): void }[];
  failure?: string;
  /** Bundles whose node died, waiting for a new node (state RESCHEDULING). */
  lostBundles?: number[];
  /**
   * Head restart: bundles whose node has not re-registered yet (state RESCHEDULING). They are
   * re-attached where they were, or re-reserved elsewhere when the recovery window ends.
   */
  restoring?: Set<number>;
}

const accepts = acceptedBy('head');

function newId(prefix: string): string {
  return `${prefix}${randomBytes(6).toString('hex')}`;
}

/** A running head. */
export class Head extends EventEmitter<HeadEvents> {
  readonly store: HeadStore;
  readonly token: string;
  readonly sessionDir: string | undefined;
  private server!: Server;
  private readonly nodes = new Map<string, NodeRec>();
  private readonly actors = new Map<string, ActorRec>();
  private readonly pgs = new Map<string, PgRec>();
  private readonly pendingActors = new Set<ActorRec>();
  private readonly pendingPgs = new Set<PgRec>();
  /** Head connections of workers, by `actorId:incarnation`. */
  private readonly workerConns = new Map<string, Connection>();
  private pumpScheduled = false;
  private closing = false;
  /**
   * Head restart: actors restored from the store that may still run on their node, until the node
   * re-registers and lists them (or the recovery window ends and they count as lost).
   */
  private readonly recovering = new Set<ActorRec>();
  private recoveryTimer: NodeJS.Timeout | undefined;
  /** Actor calls served cluster-wide, as workers report them (`workerStats`). */
  private callsServed = 0;
  /** Connected clients by id, so a reconnecting client can resume its id (and its actors). */
  private readonly clients = new Map<string, Connection>();

  /** Use `startHead`. */
  constructor(
    private readonly opts: HeadOptions & typeof headDefaults & { token: string },
  ) {
    super();
    this.token = opts.token;
    this.sessionDir = opts.sessionDir;
    this.store = new HeadStore({ sessionDir: opts.sessionDir });
  }

  /** `host:port` that nodes and drivers connect to. */
  get address(): string {
    return this.server.address;
  }
  get port(): number {
    return this.server.port;
  }
  get host(): string {
    return this.server.host;
  }

  /** @internal */
  async start(): Promise<void> {
    this.recover();
    this.server = await listen({
      host: this.opts.host,
      port: this.opts.port,
      token: this.opts.token,
      accepts,
      maxFrameBytes: this.opts.maxFrameBytes,
      heartbeatIntervalMs: this.opts.heartbeatIntervalMs,
      handler: (m, c) => this.handle(m, c),
      holdProcess: this.opts.holdProcess ?? true,
    });
    if (!['127.0.0.1', 'localhost', '::1'].includes(this.opts.host)) {
      log.warn(`head listens on ${this.server.address}: reachable beyond this machine`);
    }
  }

  /** Actor calls served since this head started, as reported by workers every few seconds. */
  get callsTotal(): number {
    return this.callsServed;
  }

  listNodes(): NodeInfo[] {
    return [...this.nodes.values()].map((n) => ({ ...n.info, available: { ...n.sched.pool.available } }));
  }
  listActors(): ActorInfo[] {
    return [...this.actors.values()].map((a) => ({ ...a.info }));
  }
  getActor(actorId: string): ActorInfo | undefined {
    const a = this.actors.get(actorId);
    return a ? { ...a.info } : undefined;
  }
  listPlacementGroups(): PlacementGroupInfo[] {
    return [...this.pgs.values()].map((p) => ({ ...p.info }));
  }

  /** Kills an actor; with `noRestart: false` it restarts if its `maxRestarts` allows. */
  killActor(actorId: string, opts: { noRestart?: boolean } = {}): void {
    const rec = this.actors.get(actorId);
    if (!rec) throw new NotFoundError(`no actor ${actorId}`, { context: { actorId } });
    this.kill(rec, opts.noRestart ?? true, 'killed by request');
  }

  /** Stops serving; nodes and clients see the connection close. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    if (this.recoveryTimer) clearTimeout(this.recoveryTimer);
    await this.server.close();
    this.store.close();
  }

  // -------------------------------------------------------------------------------------------

  private handle(m: Message, conn: Connection): unknown {
    const role = conn.meta.role as 'node' | 'client' | undefined;
    const msg = m as HeadRequest | WorkerExited | WorkerLog | WorkerStats;
    // Who may send what is in the protocol's route table.
    const sender: Sender = role === undefined ? 'unregistered' : role === 'node' ? 'node' : conn.meta.kind === 'worker' ? 'worker' : 'driver';
    const senders = sendersOf(msg.type);
    if (!senders.includes(sender)) {
      if (sender === 'unregistered') {
        conn.close(`'${msg.type}' before registering`, 1008);
        return undefined;
      }
      if (senders.includes('unregistered')) throw new InvalidArgumentError('this connection is already registered');
      throw new ProtocolError(`'${msg.type}' is not for a ${sender} to send`);
    }
    if (msg.type === 'registerNode') return this.registerNode(msg, conn);
    if (msg.type === 'registerClient') {
      const resumed =
        typeof msg.clientId === 'string' && /^driver_[0-9a-f]{12}$/.test(msg.clientId) && !this.clients.has(msg.clientId);
      const clientId =
        msg.kind === 'worker' ? `worker:${msg.actorId}:${msg.incarnation ?? 0}` : resumed ? msg.clientId! : newId('driver_');
      conn.meta = { role: 'client', clientId, kind: msg.kind, jobId: msg.jobId };
      this.clients.set(clientId, conn);
      conn.onClose(() => this.clients.get(clientId) === conn && this.clients.delete(clientId));
      if (msg.kind === 'worker') {
        const key = `${msg.actorId}:${msg.incarnation ?? 0}`;
        this.workerConns.set(key, conn);
        conn.onClose(() => this.workerConns.get(key) === conn && this.workerConns.delete(key));
      }
      this.emit('client', { clientId, kind: msg.kind, jobId: msg.jobId, event: 'connected' });
      conn.onClose(() => this.clientGone(clientId, msg.kind, msg.jobId));
      return { clientId, sessionDir: this.sessionDir };
    }
    if (msg.type === 'workerExited') return this.workerExited(msg);
    if (msg.type === 'workerStats') {
      if (typeof msg.calls === 'number' && Number.isFinite(msg.calls) && msg.calls > 0) this.callsServed += msg.calls;
      return undefined;
    }
    if (msg.type === 'fetchPackage') return this.packageArchive(msg.hash);
    if (msg.type === 'workerLog') {
      const { type: _, ...log } = msg;
      this.emit('workerLog', { ...log, nodeId: conn.meta.nodeId as string });
      return undefined;
    }
    const clientId = conn.meta.clientId as string;
    switch (msg.type) {
      case 'workerHello':
        return this.workerHello(msg.actorId, msg.incarnation);
      case 'actorReady':
        return this.actorReady(msg.actorId, msg.incarnation, msg.address, msg.pid);
      case 'actorLoadFailed':
        return this.actorLoadFailed(msg.actorId, msg.incarnation, msg.error);
      case 'createActor':
        return this.createActor(msg, clientId);
      case 'waitActor':
        return this.waitActor(msg);
      case 'killActor':
        return this.killActor(msg.actorId, { noRestart: msg.noRestart });
      case 'getActorByName': {
        const rec = [...this.actors.values()].find(
          (a) => a.info.name === msg.name && a.info.state !== 'DEAD',
        );
        if (!rec) throw new NotFoundError(`no live actor named '${msg.name}'`);
        return { ...rec.info };
      }
      case 'getActorInfo': {
        const info = this.getActor(msg.actorId);
        if (!info) throw new NotFoundError(`no actor ${msg.actorId}`, { context: { actorId: msg.actorId } });
        return info;
      }
      case 'listActors':
        return this.listActors();
      case 'listNodes':
        return this.listNodes();
      case 'createPlacementGroup':
        return this.createPlacementGroup(msg, clientId);
      case 'waitPlacementGroup':
        return this.waitPlacementGroup(msg.pgId);
      case 'removePlacementGroup':
        return this.removePlacementGroup(msg.pgId);
      case 'kvPut':
        this.store.kvPut(msg.key, msg.value);
        return true;
      case 'kvGet':
        return this.store.kvGet(msg.key) ?? null;
      default:
        conn.close(`unexpected message type '${(msg as Message).type}' for the head`, 1008);
        return undefined;
    }
  }

  private registerNode(msg: RegisterNode, conn: Connection): { nodeId: string } {
    checkResources(msg.resources, 'resources');
    if (conn.meta.role !== undefined) throw new InvalidArgumentError('this connection is already registered');
    const nodeId = msg.nodeId && !this.nodes.get(msg.nodeId)?.sched.alive ? msg.nodeId : newId('node_');
    const gpus = Math.floor(msg.resources.GPU ?? 0);
    const pool = new ResourcePool(msg.resources, [...Array(gpus).keys()]);
    const sched: SchedNode = { nodeId, pool, alive: true, actorCount: 0 };
    const info: Mutable<NodeInfo> = {
      nodeId,
      hostname: msg.hostname,
      host: msg.host,
      pid: msg.pid,
      state: 'ALIVE',
      total: { ...msg.resources },
      available: pool.available,
      sessionDir: msg.sessionDir,
      startedAtMs: Date.now(),
    };
    this.nodes.set(nodeId, { info, conn, sched });
    conn.meta = { role: 'node', nodeId };
    conn.setHeartbeatTimeout(this.opts.nodeHeartbeatTimeoutMs);
    conn.onClose((reason) => this.nodeGone(nodeId, reason));
    this.store.putNode(info);
    this.restoreBundles(nodeId);
    this.reattachWorkers(nodeId, msg, conn);
    this.emit('node', { ...info, available: { ...pool.available } });
    log.info(`node ${nodeId} joined from ${conn.peer}`);
    this.schedulePump();
    return { nodeId };
  }

  private nodeGone(nodeId: string, reason: string): void {
    const node = this.nodes.get(nodeId);
    if (!node || !node.sched.alive) return;
    node.sched.alive = false;
    node.info.state = 'DEAD';
    if (!this.closing) {
      this.store.putNode(node.info);
      this.emit('node', { ...node.info });
      log.warn(`node ${nodeId} is dead: ${reason}`);
    }
    // Bundles first, so actors restarting below wait for their bundle's new home.
    for (const pg of this.pgs.values()) {
      if ((pg.info.state !== 'CREATED' && pg.info.state !== 'RESCHEDULING') || !pg.reservations) continue;
      const lost = pg.reservations.flatMap((r, i) => (r?.node === node.sched ? [i] : []));
      if (lost.length === 0) continue;
      pg.lostBundles = [...new Set([...(pg.lostBundles ?? []), ...lost])];
      pg.info.state = 'RESCHEDULING';
      this.pendingPgs.add(pg);
      this.savePg(pg);
      this.schedulePump();
    }
    for (const rec of this.actors.values()) {
      if (rec.alloc?.node !== node.sched || rec.info.state === 'DEAD') continue;
      rec.alloc = undefined; // its pool is gone with the node
      this.processGone(rec, { reason: 'node-died', message: `node ${nodeId} died: ${reason}` });
    }
  }

  private clientGone(clientId: string, kind: 'driver' | 'worker', jobId?: string): void {
    if (this.closing) return;
    this.emit('client', { clientId, kind, jobId, event: 'disconnected' });
    for (const rec of this.actors.values()) {
      if (rec.info.ownerId !== clientId || rec.info.options.detached || rec.info.state === 'DEAD') continue;
      this.kill(rec, true, `its owner ${clientId} exited`, 'owner-died');
    }
    for (const pg of this.pgs.values()) {
      if (pg.info.ownerId === clientId && !pg.info.detached && pg.info.state !== 'REMOVED') {
        this.removePlacementGroup(pg.info.pgId);
      }
    }
  }

  private createActor(msg: CreateActor, ownerId: string): { actorId: string } {
    checkCreateActor(msg);
    const o = msg.options;
    if (o.name !== undefined) {
      for (const a of this.actors.values()) {
        if (a.info.name === o.name && a.info.state !== 'DEAD') {
          throw new NameTakenError(`an actor named '${o.name}' already exists (${a.info.actorId})`);
        }
      }
    }
    if (o.placementGroupId !== undefined && !this.pgs.has(o.placementGroupId)) {
      throw new PlacementGroupError(`no placement group ${o.placementGroupId}`);
    }
    const actorId = msg.actorId;
    if (typeof actorId !== 'string' || actorId.length < 8 || actorId.length > 64 || this.actors.has(actorId)) {
      throw new InvalidArgumentError(`actor id '${String(actorId).slice(0, 64)}' is invalid or taken`);
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
    const verdict = this.schedule(rec);
    if (verdict.kind === 'infeasible') {
      // Kept as DEAD so `actorInfo` explains it; the creator's first call fails with this.
      rec.info.state = 'DEAD';
      rec.info.deathCause = { reason: 'infeasible', message: verdict.reason };
    }
    this.actors.set(actorId, rec);
    this.store.putActor(rec.info, msg.ctorArgs);
    this.emit('actor', { ...rec.info });
    if (verdict.kind === 'infeasible') throw new InfeasibleError(verdict.reason, { context: { actorId } });
    return { actorId };
  }

  /** Places the actor and starts its worker, or queues it; never throws. */
  private schedule(rec: ActorRec): { kind: 'placed' | 'wait' } | { kind: 'infeasible'; reason: string } {
    const o = rec.info.options;
    let placed: { node: SchedNode; pool: ResourcePool; alloc: Allocation } | undefined;
    if (o.placementGroupId !== undefined) {
      const pg = this.pgs.get(o.placementGroupId);
      if (!pg || pg.info.state === 'REMOVED' || pg.info.state === 'FAILED') {
        return { kind: 'infeasible', reason: `placement group ${o.placementGroupId} was removed` };
      }
      if (pg.info.state !== 'CREATED') {
        this.pendingActors.add(rec);
        return { kind: 'wait' };
      }
      const idx = o.bundleIndex;
      if (idx >= pg.bundlePools!.length) {
        return { kind: 'infeasible', reason: `bundle index ${idx} out of range (${pg.bundlePools!.length} bundles)` };
      }
      const candidates = idx >= 0 ? [idx] : pg.bundlePools!.map((_, i) => i);
      if (!candidates.some((i) => pg.bundlePools![i]!.couldEverFit(o.resources))) {
        return { kind: 'infeasible', reason: `no bundle of placement group ${pg.info.pgId} can hold the actor's resources` };
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
        [...this.nodes.values()].map((n) => n.sched),
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
      this.pendingActors.add(rec);
      return { kind: 'wait' };
    }
    this.pendingActors.delete(rec);
    rec.alloc = placed;
    placed.node.actorCount++;
    rec.info.incarnation++;
    rec.info.nodeId = placed.node.nodeId;
    rec.info.gpuIds = placed.alloc.gpuIds;
    const node = this.nodes.get(placed.node.nodeId)!;
    node.conn.send({
      type: 'startWorker',
      actorId: rec.info.actorId,
      incarnation: rec.info.incarnation,
      gpuIds: placed.alloc.gpuIds,
      env: o.env ?? {},
    });
    if (this.actors.has(rec.info.actorId)) this.save(rec);
    return { kind: 'placed' };
  }

  private release(rec: ActorRec): void {
    const a = rec.alloc;
    if (!a) return;
    rec.alloc = undefined;
    a.pool.give(a.alloc);
    if (!a.uncounted) a.node.actorCount--;
    this.schedulePump();
  }

  private workerHello(actorId: string, incarnation: number): WorkerAssignment {
    const rec = this.actors.get(actorId);
    if (!rec || rec.info.incarnation !== incarnation || rec.info.state === 'DEAD') {
      throw new NotFoundError(`actor ${actorId} incarnation ${incarnation} is not expected`);
    }
    return { spec: rec.info.spec, options: rec.info.options, ctorArgs: rec.ctorArgs };
  }

  private actorReady(actorId: string, incarnation: number, address: string, pid: number): boolean {
    const rec = this.actors.get(actorId);
    if (!rec || rec.info.incarnation !== incarnation || rec.info.state === 'DEAD') {
      throw new NotFoundError(`actor ${actorId} incarnation ${incarnation} is not expected`);
    }
    rec.info.state = 'ALIVE';
    rec.info.address = address;
    rec.info.pid = pid;
    this.save(rec);
    return true;
  }

  private actorLoadFailed(actorId: string, incarnation: number, error: WireError): boolean {
    const rec = this.actors.get(actorId);
    if (!rec || rec.info.incarnation !== incarnation || rec.info.state === 'DEAD') return false;
    const err = fromWire(error);
    this.setDead(rec, { reason: 'load-failed', message: err.message, error });
    return true;
  }

  private workerExited(msg: WorkerExited): void {
    const rec = this.actors.get(msg.actorId);
    if (!rec || rec.info.incarnation !== msg.incarnation) return;
    const how = msg.signal ? `signal ${msg.signal}` : `exit code ${msg.exitCode}`;
    if (rec.info.state === 'DEAD') {
      this.release(rec);
      return;
    }
    const killed = rec.killIntent !== undefined;
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
  private processGone(rec: ActorRec, cause: DeathCause): void {
    this.recovering.delete(rec);
    this.release(rec);
    this.stopStale(rec);
    rec.lastDeath = { ...cause, incarnation: rec.info.incarnation };
    const { maxRestarts } = rec.info.options;
    const restartsLeft = maxRestarts === -1 || rec.info.numRestarts < maxRestarts;
    if (rec.killIntent === 'noRestart' || !restartsLeft || this.closing) {
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

  private kill(rec: ActorRec, noRestart: boolean, why: string, reason: DeathCause['reason'] = 'killed'): void {
    if (rec.info.state === 'DEAD') return;
    rec.killIntent = noRestart ? 'noRestart' : 'restart';
    if (rec.alloc) {
      const node = this.nodes.get(rec.alloc.node.nodeId);
      if (reason === 'owner-died') rec.lastDeath = { reason, message: why, incarnation: rec.info.incarnation };
      node?.conn.send({ type: 'stopWorker', actorId: rec.info.actorId, incarnation: rec.info.incarnation });
      if (reason === 'owner-died' || noRestart) {
        // Mark it dead now so callers fail fast; the exit report only releases resources.
        this.setDead(rec, { reason, message: `actor ${rec.info.actorId}: ${why}` }, false);
      }
    } else if (noRestart) {
      this.setDead(rec, { reason, message: `actor ${rec.info.actorId}: ${why}` });
    }
  }

  /**
   * Tells a worker whose node was declared dead to exit itself: its node agent may only be
   * silent, and callers must not keep talking to an incarnation the head has replaced.
   */
  private stopStale(rec: ActorRec): void {
    const conn = this.workerConns.get(`${rec.info.actorId}:${rec.info.incarnation}`);
    conn?.send({ type: 'stopWorker', actorId: rec.info.actorId, incarnation: rec.info.incarnation });
  }

  private setDead(rec: ActorRec, cause: DeathCause, releaseNow = true): void {
    this.pendingActors.delete(rec);
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
  }

  private save(rec: ActorRec): void {
    if (this.closing) return;
    this.store.putActor(rec.info);
    this.emit('actor', { ...rec.info });
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

  private waitActor(msg: WaitActor): ActorLocation | Promise<ActorLocation> {
    const rec = this.actors.get(msg.actorId);
    if (!rec) throw new NotFoundError(`no actor ${msg.actorId}`, { context: { actorId: msg.actorId } });
    if (this.ready(rec, msg.afterIncarnation, msg.untilAlive)) return this.location(rec);
    return new Promise((resolve) =>
      rec.waiters.push({ afterIncarnation: msg.afterIncarnation, untilAlive: msg.untilAlive, resolve }),
    );
  }

  // ---- head restart ------------------------------------------------------------------------

  /**
   * Restores actors (and their constructor arguments) from the session's store. Actors that were
   * placed may still run: they keep their state and address, and wait for their node agent to
   * re-register and list them. After the recovery window (the node heartbeat timeout) those not
   * claimed count as lost with their node, and non-detached actors whose owner did not reconnect
   * are killed, as if the owner had exited.
   */
  private recover(): void {
    if (!this.sessionDir) return;
    const stored = this.store.listActors();
    const pgs = this.recoverPlacementGroups();
    if (stored.length === 0 && pgs === 0) return;
    for (const info of stored) {
      const rec: ActorRec = {
        info: { ...info },
        ctorArgs: this.store.actorCtorArgs(info.actorId) ?? new Uint8Array(),
        waiters: [],
      };
      this.actors.set(info.actorId, rec);
      if (info.state === 'DEAD') continue;
      if (info.incarnation > 0 && info.nodeId) this.recovering.add(rec);
      else this.pendingActors.add(rec);
    }
    log.info(
      `recovered ${stored.length} actors and ${pgs} placement groups from ${this.sessionDir}; ` +
        `${this.recovering.size} actors wait for their node`,
    );
    this.recoveryTimer = setTimeout(() => this.endRecovery(), this.opts.nodeHeartbeatTimeoutMs);
    this.recoveryTimer.unref();
  }

  /**
   * Restores the live placement groups of the store. A group whose bundles were reserved waits
   * (RESCHEDULING) for each bundle's node to re-register, and gets the same resources and GPU
   * indices there; a group still pending is reserved afresh. Returns how many are live.
   */
  private recoverPlacementGroups(): number {
    let live = 0;
    for (const info of this.store.listPlacementGroups()) {
      const pg: PgRec = { info: { ...info }, waiters: [] };
      this.pgs.set(info.pgId, pg);
      if (info.state === 'REMOVED' || info.state === 'FAILED') continue;
      live++;
      const n = info.bundles.length;
      if (info.bundleNodes?.length === n && (info.state === 'CREATED' || info.state === 'RESCHEDULING')) {
        pg.reservations = new Array<BundleReservation>(n);
        pg.bundlePools = new Array<ResourcePool>(n);
        pg.restoring = new Set(info.bundles.keys());
        pg.info.state = 'RESCHEDULING';
      } else {
        pg.info.state = 'PENDING';
        pg.info.bundleNodes = undefined;
        pg.info.bundleGpuIds = undefined;
        this.pendingPgs.add(pg);
      }
    }
    return live;
  }

  /** A node re-registered after a head restart: its restored bundles take their place again. */
  private restoreBundles(nodeId: string): void {
    const node = this.nodes.get(nodeId)!;
    for (const pg of this.pgs.values()) {
      if (!pg.restoring) continue;
      for (const i of [...pg.restoring]) {
        if (pg.info.bundleNodes![i] !== nodeId) continue;
        const bundle = pg.info.bundles[i]!;
        const gpuIds = pg.info.bundleGpuIds?.[i] ?? [];
        pg.reservations![i] = { node: node.sched, alloc: node.sched.pool.takeExact(bundle, gpuIds) };
        pg.bundlePools![i] = new ResourcePool(bundle, gpuIds);
        pg.restoring.delete(i);
      }
      if (pg.restoring.size > 0) continue;
      pg.restoring = undefined;
      pg.info.state = 'CREATED';
      this.savePg(pg);
      for (const w of pg.waiters.splice(0)) w.resolve();
      log.info(`placement group ${pg.info.pgId} restored with its ${pg.info.bundles.length} bundles`);
    }
  }

  /** The bundle a re-attached actor of a placement group runs in (its own, or any on its node). */
  private bundleOf(rec: ActorRec, nodeId: string): { pg: PgRec; index: number } | undefined {
    const pg = this.pgs.get(rec.info.options.placementGroupId!);
    if (!pg?.bundlePools) return undefined;
    const want = rec.info.options.bundleIndex;
    const ids = rec.info.gpuIds ?? [];
    const index = pg.info.bundles.findIndex(
      (b, i) =>
        (want < 0 || want === i) &&
        pg.info.bundleNodes?.[i] === nodeId &&
        pg.bundlePools![i] !== undefined &&
        fitsIn(rec.info.options.resources, pg.bundlePools![i]!.available) &&
        ids.every((id) => pg.bundlePools![i]!.gpuFree.has(id)),
    );
    return index < 0 ? undefined : { pg, index };
  }

  private reattachWorkers(nodeId: string, msg: RegisterNode, conn: Connection): void {
    const node = this.nodes.get(nodeId)!;
    for (const w of msg.workers ?? []) {
      const rec = this.actors.get(w.actorId);
      if (rec && this.recovering.has(rec) && rec.info.nodeId === nodeId && rec.info.incarnation === w.incarnation) {
        this.recovering.delete(rec);
        if (rec.info.options.placementGroupId === undefined) {
          const alloc = node.sched.pool.takeExact(rec.info.options.resources, rec.info.gpuIds ?? []);
          rec.alloc = { node: node.sched, pool: node.sched.pool, alloc };
          node.sched.actorCount++;
        } else {
          const b = this.bundleOf(rec, nodeId);
          if (b) {
            const pool = b.pg.bundlePools![b.index]!;
            rec.alloc = { node: node.sched, pool, alloc: pool.takeExact(rec.info.options.resources, rec.info.gpuIds ?? []) };
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
    this.recoveryTimer = undefined;
    if (this.closing) return;
    for (const rec of [...this.recovering]) {
      this.processGone(rec, {
        reason: 'node-died',
        message: `actor ${rec.info.actorId}: its node ${rec.info.nodeId ?? '?'} did not report it after the head restarted`,
      });
    }
    // Bundles whose node did not come back are lost with it: re-reserve them elsewhere.
    for (const pg of this.pgs.values()) {
      if (!pg.restoring) continue;
      pg.lostBundles = [...new Set([...(pg.lostBundles ?? []), ...pg.restoring])];
      pg.restoring = undefined;
      this.pendingPgs.add(pg);
    }
    for (const rec of this.actors.values()) {
      if (rec.info.state === 'DEAD' || rec.info.options.detached || this.clients.has(rec.info.ownerId)) continue;
      this.kill(rec, true, `its owner ${rec.info.ownerId} did not reconnect after the head restarted`, 'owner-died');
    }
    for (const pg of this.pgs.values()) {
      if (pg.info.state === 'REMOVED' || pg.info.detached || this.clients.has(pg.info.ownerId)) continue;
      this.removePlacementGroup(pg.info.pgId);
    }
    this.schedulePump();
  }

  /**
   * The archive of an uploaded working dir, as uploaded; a package unpacked by an older head
   * (which kept no archive) is packed again from its directory.
   */
  private packageArchive(hash: string): Uint8Array {
    if (typeof hash !== 'string' || !isPackageHash(hash)) throw new InvalidArgumentError('package id must be a sha256 hex digest');
    const dir = this.sessionDir ? packagesDir(this.sessionDir, hash) : undefined;
    if (!dir || !existsSync(dir)) throw new NotFoundError(`package ${hash} was not uploaded to this head`);
    try {
      return readFileSync(archivePath(dir));
    } catch {
      const packed = packDir(dir);
      if (packed.hash !== hash) throw new NotFoundError(`package ${hash} changed on the head since it was uploaded`);
      return packed.archive;
    }
  }

  // ---- placement groups ------------------------------------------------------------------

  private createPlacementGroup(msg: CreatePlacementGroup, ownerId: string): { pgId: string } {
    checkCreatePlacementGroup(msg);
    const pgId = msg.pgId ?? newId('pg_');
    if (typeof pgId !== 'string' || this.pgs.has(pgId)) {
      throw new InvalidArgumentError(`placement group id '${String(pgId).slice(0, 64)}' is invalid or taken`);
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
    this.pgs.set(pgId, pg);
    if (this.tryReserve(pg) === 'infeasible') {
      this.savePg(pg);
      throw new InfeasibleError(pg.failure!);
    }
    this.savePg(pg);
    return { pgId };
  }

  /** Re-reserves the bundles a dead node held; the others stay where they are. */
  private tryRereserve(pg: PgRec): 'placed' | 'wait' {
    const lost = pg.lostBundles!;
    const kept = new Set(pg.reservations!.filter((_, i) => !lost.includes(i)).map((r) => r.node.nodeId));
    // STRICT_SPREAD still means one bundle per node: skip nodes that hold surviving bundles.
    const nodes = [...this.nodes.values()]
      .map((n) => n.sched)
      .filter((n) => pg.info.strategy !== 'STRICT_SPREAD' || !kept.has(n.nodeId));
    const r = reserveBundles(nodes, lost.map((i) => pg.info.bundles[i]!), pg.info.strategy);
    if (r.kind !== 'placed') {
      this.pendingPgs.add(pg);
      return 'wait';
    }
    this.pendingPgs.delete(pg);
    lost.forEach((bundle, j) => {
      const res = r.value[j]!;
      pg.reservations![bundle] = res;
      pg.bundlePools![bundle] = new ResourcePool(pg.info.bundles[bundle]!, res.alloc.gpuIds);
    });
    pg.lostBundles = undefined;
    pg.info.state = 'CREATED';
    pg.info.bundleNodes = pg.reservations!.map((res) => res.node.nodeId);
    pg.info.bundleGpuIds = pg.reservations!.map((res) => [...res.alloc.gpuIds]);
    for (const w of pg.waiters.splice(0)) w.resolve();
    this.schedulePump();
    return 'placed';
  }

  private tryReserve(pg: PgRec): 'placed' | 'wait' | 'infeasible' {
    if (pg.restoring) return 'wait'; // until its nodes re-register or the recovery window ends
    if (pg.lostBundles) return this.tryRereserve(pg);
    const r = reserveBundles(
      [...this.nodes.values()].map((n) => n.sched),
      pg.info.bundles,
      pg.info.strategy,
    );
    if (r.kind === 'infeasible') {
      pg.info.state = 'FAILED';
      pg.failure = r.reason;
      return 'infeasible';
    }
    if (r.kind === 'wait') {
      this.pendingPgs.add(pg);
      return 'wait';
    }
    this.pendingPgs.delete(pg);
    pg.reservations = r.value;
    pg.bundlePools = r.value.map((res, i) => new ResourcePool(pg.info.bundles[i]!, res.alloc.gpuIds));
    pg.info.state = 'CREATED';
    pg.info.bundleNodes = r.value.map((res) => res.node.nodeId);
    pg.info.bundleGpuIds = r.value.map((res) => [...res.alloc.gpuIds]);
    for (const w of pg.waiters.splice(0)) w.resolve();
    this.schedulePump();
    return 'placed';
  }

  private waitPlacementGroup(pgId: string): Promise<boolean> | boolean {
    const pg = this.pgs.get(pgId);
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

  private removePlacementGroup(pgId: string): boolean {
    const pg = this.pgs.get(pgId);
    if (!pg) throw new NotFoundError(`no placement group ${pgId}`);
    if (pg.info.state === 'REMOVED') return true;
    for (const rec of this.actors.values()) {
      if (rec.info.options.placementGroupId === pgId && rec.info.state !== 'DEAD') {
        this.kill(rec, true, `its placement group ${pgId} was removed`);
      }
    }
    this.pendingPgs.delete(pg);
    for (const r of pg.reservations ?? []) if (r?.node.alive) r.node.pool.give(r.alloc);
    pg.restoring = undefined;
    pg.reservations = undefined;
    pg.info.state = 'REMOVED';
    for (const w of pg.waiters.splice(0)) w.reject(new PlacementGroupError(`placement group ${pgId} was removed`));
    this.savePg(pg);
    this.schedulePump();
    return true;
  }

  private savePg(pg: PgRec): void {
    if (this.closing) return;
    this.store.putPlacementGroup(pg.info);
    this.emit('placementGroup', { ...pg.info });
  }

  /** Retries everything waiting for resources, once per tick. */
  private schedulePump(): void {
    if (this.pumpScheduled || this.closing) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      for (const pg of [...this.pendingPgs]) {
        if (this.tryReserve(pg) === 'placed') this.savePg(pg);
      }
      for (const rec of [...this.pendingActors]) {
        if (rec.info.state === 'DEAD') {
          this.pendingActors.delete(rec);
          continue;
        }
        const v = this.schedule(rec);
        if (v.kind === 'infeasible') {
          this.setDead(rec, { reason: 'infeasible', message: v.reason });
        }
      }
    });
  }
}

/**
 * Starts a head.
 *
 * @example
 * const head = await startHead({ port: 0, sessionDir: '/tmp/rtjob-session' });
 * head.on('actor', (a) => console.log(a.actorId, a.state));
 * await head.close();
 */
export async function startHead(options: HeadOptions = {}): Promise<Head> {
  const resolved = {
    ...headDefaults,
    ...Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)),
    token: options.token ?? randomBytes(24).toString('base64url'),
  } as HeadOptions & typeof headDefaults & { token: string };
  const head = new Head(resolved);
  await head.start();
  return head;
}

