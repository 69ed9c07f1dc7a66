/**
 * The head: the control plane. It registers nodes and clients, schedules actors and placement
 * groups, tracks actor state (PENDING → ALIVE ⇄ RESTARTING → DEAD), restarts actors whose
 * process died, and kills the non-detached actors of a driver that went away. Calls never pass
 * through it.
 *
 * This file holds the public `Head`, its connections and the handler of each message type; the
 * concerns live beside it: `nodes.ts` (node agents), `actors.ts` (actor lifecycle),
 * `placement-groups.ts`, `recovery.ts` (head restart), sharing `state.ts`.
 *
 * Other parts (HTTP API, dashboard, job supervisor) attach through the returned `Head`: its
 * events (`actor`, `node`, `placementGroup`, `client`), list methods, `killActor`, and `store`.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { InvalidArgumentError, ProtocolError } from '../errors.ts';
import { guarded, logger } from '../log.ts';
import type {
  ActorInfo,
  HeadBound,
  MessageOf,
  NodeInfo,
  PlacementGroupInfo,
  RegisterClient,
  ReplyOf,
} from '../protocol.ts';
import { type Sender, acceptedBy, sendersOf } from '../protocol.ts';
import { type Connection, type Server, listen } from '../transport.ts';
import { ActorTable } from './actors.ts';
import { NodeRegistry } from './nodes.ts';
import { PlacementGroups } from './placement-groups.ts';
import { Recovery } from './recovery.ts';
import { type HeadEvents, HeadContext, type ResolvedHeadOptions, newId } from './state.ts';
import { HeadStore } from './store.ts';
import { wireLimits } from '../wire-schemas.ts';

export type { ClientEvent, HeadEvents, WorkerLogEvent } from './state.ts';

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
  /** An authenticated connection that has not registered after this long is closed. @default 10000 */
  registerTimeoutMs?: number;
  /**
   * Dead actors the head remembers (memory and store); the oldest are forgotten beyond this.
   * @default 1000
   */
  maxDeadActors?: number;
  /** A dead actor is forgotten this long after it died. @default 3600000 (1 h) */
  deadActorTtlMs?: number;
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
  registerTimeoutMs: 10_000,
  maxDeadActors: 1000,
  deadActorTtlMs: 3_600_000,
  maxFrameBytes: 64 * 1024 * 1024,
} as const;

/** Handles one message type; the return type is the reply the protocol promises for it. */
type HandlerTable = {
  [T in HeadBound]: (msg: MessageOf<T>, conn: Connection) => ReplyOf<T> | Promise<ReplyOf<T>>;
};

const accepts = acceptedBy('head');

/** A running head. */
export class Head extends EventEmitter<HeadEvents> {
  readonly store: HeadStore;
  readonly token: string;
  readonly sessionDir: string | undefined;
  private server!: Server;
  private readonly ctx: HeadContext;
  private readonly actors: ActorTable;
  private readonly pgs: PlacementGroups;
  private readonly nodes: NodeRegistry;
  private readonly recovery: Recovery;
  private pumpScheduled = false;
  private pruneTimer: NodeJS.Timeout | undefined;
  /** Actor calls served cluster-wide, as workers report them (`workerStats`). */
  private callsServed = 0;

  /** Use `startHead`. */
  constructor(private readonly opts: ResolvedHeadOptions) {
    super();
    this.token = opts.token;
    this.sessionDir = opts.sessionDir;
    this.store = new HeadStore({ sessionDir: opts.sessionDir });
    this.ctx = new HeadContext(opts, this.store, this, () => this.schedulePump());
    this.actors = new ActorTable(this.ctx);
    this.pgs = new PlacementGroups(this.ctx, this.actors);
    this.recovery = new Recovery(this.ctx, this.actors, this.pgs);
    this.nodes = new NodeRegistry(this.ctx, this.actors, this.pgs, this.recovery);
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
    this.recovery.recover();
    this.actors.pruneDead();
    this.pruneTimer = setInterval(
      () => guarded(log, 'pruning dead actors', () => this.actors.pruneDead()),
      Math.min(60_000, this.opts.deadActorTtlMs),
    );
    this.pruneTimer.unref();
    this.server = await listen({
      host: this.opts.host,
      port: this.opts.port,
      token: this.opts.token,
      accepts,
      maxFrameBytes: this.opts.maxFrameBytes,
      heartbeatIntervalMs: this.opts.heartbeatIntervalMs,
      handler: (m, c) => this.handle(m as MessageOf<HeadBound>, c),
      holdProcess: this.opts.holdProcess ?? true,
      // Control messages are small; constructor arguments are the largest thing sent here.
      maxMessageBytes: wireLimits.ctorArgsBytes + 1024 * 1024,
      bulkAfterRegistration: true,
      onConnection: (conn) => {
        // A peer that authenticates but never registers does not get to hold a connection.
        const ms = this.opts.registerTimeoutMs;
        const t = setTimeout(() => {
          if (conn.meta.role === undefined) conn.close(`did not register within ${ms} ms`, 1008);
        }, ms);
        t.unref();
        conn.onClose(() => clearTimeout(t));
      },
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
    return this.nodes.list();
  }
  listActors(): ActorInfo[] {
    return this.actors.list();
  }
  getActor(actorId: string): ActorInfo | undefined {
    const a = this.actors.get(actorId);
    return a ? { ...a.info } : undefined;
  }
  listPlacementGroups(): PlacementGroupInfo[] {
    return [...this.ctx.pgs.values()].map((p) => ({ ...p.info }));
  }

  /**
   * Kills an actor; with `noRestart: false` it restarts if its `maxRestarts` allows. `why` is its
   * death cause, as actor lists show it.
   */
  killActor(actorId: string, opts: { noRestart?: boolean; why?: string } = {}): void {
    this.actors.killById(actorId, opts.noRestart ?? true, opts.why ?? 'killed by request');
  }

  /** Stops serving; nodes and clients see the connection close. */
  async close(): Promise<void> {
    if (this.ctx.closing) return;
    this.ctx.closing = true;
    this.recovery.close();
    clearInterval(this.pruneTimer);
    await this.server.close();
    this.store.close();
  }

  // -------------------------------------------------------------------------------------------

  /** The handler of each message type the head receives (who may send it is checked first). */
  private readonly handlers: HandlerTable = {
    registerNode: (msg, conn) => this.nodes.register(msg, conn),
    registerClient: (msg, conn) => this.registerClient(msg, conn),
    workerExited: (msg) => this.actors.workerExited(msg),
    workerLog: (msg, conn) => {
      const { type: _, ...log } = msg;
      this.emit('workerLog', { ...log, nodeId: conn.meta.nodeId as string });
    },
    workerStats: (msg) => {
      if (typeof msg.calls === 'number' && Number.isFinite(msg.calls) && msg.calls > 0)
        this.callsServed += msg.calls;
    },
    nodeStats: (msg, conn) => this.nodes.stats(msg, conn),
    fetchPackage: (msg) => this.nodes.packageArchive(msg.hash),
    workerHello: (msg) => this.actors.workerHello(msg.actorId, msg.incarnation),
    actorReady: (msg) => this.actors.actorReady(msg.actorId, msg.incarnation, msg.address, msg.pid),
    renewLease: (msg) => this.actors.renewLease(msg.actorId, msg.incarnation),
    actorLoadFailed: (msg) => this.actors.actorLoadFailed(msg.actorId, msg.incarnation, msg.error),
    createActor: (msg, conn) => this.actors.create(msg, conn.meta.clientId as string),
    waitActor: (msg) => this.actors.wait(msg),
    killActor: (msg, conn) =>
      this.actors.killById(msg.actorId, msg.noRestart ?? true, {
        byClient: conn.meta.clientId as string,
      }),
    getActorByName: (msg) => this.actors.byName(msg.name),
    getActorInfo: (msg) => this.actors.info(msg.actorId),
    listActors: () => this.actors.list(),
    listNodes: () => this.nodes.list(),
    createPlacementGroup: (msg, conn) => this.pgs.create(msg, conn.meta.clientId as string),
    waitPlacementGroup: (msg) => this.pgs.wait(msg.pgId),
    removePlacementGroup: (msg) => this.pgs.remove(msg.pgId),
    kvPut: (msg) => {
      this.store.kvPut(msg.key, msg.value);
      return true;
    },
    kvGet: (msg) => this.store.kvGet(msg.key) ?? null,
  };

  private handle(msg: MessageOf<HeadBound>, conn: Connection): unknown {
    const role = conn.meta.role as 'node' | 'client' | undefined;
    // Who may send what is in the protocol's route table.
    const sender: Sender =
      role === undefined
        ? 'unregistered'
        : role === 'node'
          ? 'node'
          : conn.meta.kind === 'worker'
            ? 'worker'
            : 'driver';
    const senders = sendersOf(msg.type);
    if (!senders.includes(sender)) {
      if (sender === 'unregistered') {
        conn.close(`'${msg.type}' before registering`, 1008);
        return undefined;
      }
      if (senders.includes('unregistered'))
        throw new InvalidArgumentError('this connection is already registered');
      throw new ProtocolError(`'${msg.type}' is not for a ${sender} to send`);
    }
    const handler = this.handlers[msg.type] as (m: typeof msg, c: Connection) => unknown;
    return handler(msg, conn);
  }

  private registerClient(msg: RegisterClient, conn: Connection): ReplyOf<'registerClient'> {
    const ctx = this.ctx;
    const resumed =
      typeof msg.clientId === 'string' &&
      /^driver_[0-9a-f]{12}$/.test(msg.clientId) &&
      !ctx.clients.has(msg.clientId);
    const clientId =
      msg.kind === 'worker'
        ? `worker:${msg.actorId}:${msg.incarnation ?? 0}`
        : resumed
          ? msg.clientId!
          : newId('driver_');
    conn.meta = { role: 'client', clientId, kind: msg.kind, jobId: msg.jobId };
    conn.allowBulk();
    ctx.clients.set(clientId, conn);
    conn.onClose(() => ctx.clients.get(clientId) === conn && ctx.clients.delete(clientId));
    if (msg.kind === 'worker') {
      const key = `${msg.actorId}:${msg.incarnation ?? 0}`;
      ctx.workerConns.set(key, conn);
      conn.onClose(() => ctx.workerConns.get(key) === conn && ctx.workerConns.delete(key));
    }
    this.emit('client', { clientId, kind: msg.kind, jobId: msg.jobId, event: 'connected' });
    conn.onClose(() => this.clientGone(clientId, msg.kind, msg.jobId));
    return { clientId, sessionDir: this.sessionDir };
  }

  private clientGone(clientId: string, kind: 'driver' | 'worker', jobId?: string): void {
    if (this.ctx.closing) return;
    this.emit('client', { clientId, kind, jobId, event: 'disconnected' });
    this.actors.killOwnedBy(clientId, `its owner ${clientId} exited`);
    this.pgs.removeOwnedBy(clientId);
  }

  /** Retries everything waiting for resources, once per tick. */
  private schedulePump(): void {
    if (this.pumpScheduled || this.ctx.closing) return;
    this.pumpScheduled = true;
    setImmediate(() =>
      guarded(log, 'scheduling', () => {
        this.pumpScheduled = false;
        this.pgs.retryPending();
        this.actors.retryPending();
      }),
    );
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
  const resolved: ResolvedHeadOptions = {
    ...headDefaults,
    ...Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)),
    token: options.token ?? randomBytes(24).toString('base64url'),
  };
  const head = new Head(resolved);
  await head.start();
  return head;
}
