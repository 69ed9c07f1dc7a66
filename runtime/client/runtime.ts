/**
 * The per-process runtime shared by drivers and workers: the connection to the head, this
 * process's own endpoint (object fetches, and calls when it hosts an actor), connections to
 * peers, the object store, and one `ActorClient` per actor this process calls.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { ConnectionError, ObjectLostError, OwnerDiedError, isRtjobError } from '../errors.ts';
import { logger } from '../log.ts';
import {
  type ActorInfo,
  type AnyRequestBody,
  type Call,
  type Message,
  type ReplyOf,
  type StreamItem,
  acceptedBy,
} from '../protocol.ts';
import {
  type Connection,
  type RequestOptions,
  type Server,
  connect,
  holdProcessWhile,
  listen,
} from '../transport.ts';
import { ActorClient } from './actor-client.ts';
import { type ObjectRef, setRefFetcher } from './object-ref.ts';
import { ObjectStore } from './object-store.ts';
import { largeBytes } from '../out-of-band.ts';
import { ShmValue, machineId, readShm, shmMinBytes, writeShm } from './shm.ts';
import { mapsSharedMemory } from './shm-map.ts';

const log = logger('client');

/** Options for `Runtime.start`. */
export interface RuntimeOptions {
  headAddress: string;
  token: string;
  kind: 'driver' | 'worker';
  actorId?: string;
  incarnation?: number;
  jobId?: string;
  /** Interface this process serves objects (and calls) on. @default '127.0.0.1' */
  host?: string;
  /** @default 30000 */
  objectTransferHoldMs?: number;
  /** Cap of this process's object store before it spills (`ObjectStoreOptions.memoryBytes`). */
  objectStoreMemoryBytes?: number;
  /** The node a worker runs on (`RTJOB_NODE_ID`), told to the peers it fetches from. */
  nodeId?: string;
  /**
   * After losing the head, keep trying to reconnect (and resume this client id) this long, for a
   * head that restarts on the same session. 0 gives up at once. @default 60000 for a driver
   * (`driverReconnectDefaultMs`), 0 for a worker (its node agent sets it when it outlives a head)
   */
  reconnectMs?: number;
}

const dataAccepts = acceptedBy('data');
const callerAccepts = acceptedBy('caller');

/**
 * How long a driver keeps reconnecting to a head that went away: longer than a head restart
 * takes, so that the restarted head still finds the driver within its recovery window and the
 * driver keeps its actors.
 */
export const driverReconnectDefaultMs = 60_000;

let current: Runtime | undefined;

/** The runtime of this process, if started. */
export function currentRuntime(): Runtime | undefined {
  return current;
}

/** Head requests that may be sent twice without harm (see `Runtime.headRequest`). */
type IdempotentRequest = Extract<
  AnyRequestBody,
  {
    type:
      | 'waitActor'
      | 'getActorInfo'
      | 'getActorByName'
      | 'listActors'
      | 'listNodes'
      | 'waitPlacementGroup'
      | 'kvGet';
  }
>;

/** One process's view of the cluster. */
export class Runtime {
  head!: Connection;
  server!: Server;
  clientId = '';
  sessionDir: string | undefined;
  objects!: ObjectStore;
  /** Set by a worker hosting an actor. */
  callHandler: ((msg: Call, conn: Connection) => unknown) | undefined;
  /** Set by a worker hosting an actor: stream acks and cancellations of the calls it runs. */
  callControl:
    | { ack(callId: string, consumed: number): void; cancel(conn: Connection, rid: number): void }
    | undefined;
  /** This process's streaming calls in progress, by call id: where their items go. */
  readonly streams = new Map<string, (m: StreamItem) => void>();
  readonly jobId: string | undefined;
  private readonly peers = new Map<string, Promise<Connection>>();
  private readonly actorClients = new Map<string, ActorClient>();
  private readonly prefix = randomBytes(5).toString('hex');
  private seq = 0;
  private closed = false;
  private readonly closeHooks: (() => Promise<void> | void)[] = [];
  private readonly headLostHooks: ((reason: string) => void)[] = [];
  /**
   * True while the head connection is down because the head went silent (a cut link, not a head
   * that closed or crashed): this process may be the one cut off. Read by a worker's lease.
   */
  headSilent = false;
  /** Set once the head is gone for good (reconnecting gave up, or was not allowed). */
  private headLostError: ConnectionError | undefined;
  /** Callers of `headReady` waiting for a reconnect. */
  private headWaiters: { resolve(c: Connection): void; reject(e: Error): void }[] = [];

  private constructor(readonly opts: RuntimeOptions) {
    this.jobId = opts.jobId;
  }

  /** Connects to the head and opens this process's endpoint; becomes `currentRuntime()`. */
  static async start(opts: RuntimeOptions): Promise<Runtime> {
    const rt = new Runtime(opts);
    rt.server = await listen({
      host: opts.host ?? '127.0.0.1',
      port: 0,
      token: opts.token,
      accepts: dataAccepts,
      maxFrameBytes: 16 * 1024 * 1024,
      handler: (m, c) => rt.serve(m, c),
      // A driver's process may exit when its script is done; a worker's lives with its actor.
      holdProcess: opts.kind !== 'driver',
    });
    rt.objects = new ObjectStore(
      rt.server.address,
      (owner, id, borrow) => rt.sendBorrow(owner, id, borrow),
      { transferHoldMs: opts.objectTransferHoldMs, memoryBytes: opts.objectStoreMemoryBytes },
    );
    try {
      rt.head = await rt.connectHead();
    } catch (e) {
      await rt.server.close();
      throw e;
    }
    rt.watchHead();
    current = rt;
    setRefFetcher((ref) => rt.fetch(ref));
    return rt;
  }

  /** Connects to the head and registers, resuming this process's client id when it has one. */
  private async connectHead(): Promise<Connection> {
    const opts = this.opts;
    const conn = await connect(opts.headAddress, {
      token: opts.token,
      // A worker may start on a machine busy starting many others; be patient.
      connectTimeoutMs: 60_000,
      holdProcess: opts.kind !== 'driver',
      accepts: acceptedBy('worker'),
      handler: (m) => {
        // The head replaced this worker's incarnation (e.g. its node was declared dead).
        if (m.type === 'stopWorker' && opts.kind === 'worker' && m.actorId === opts.actorId) {
          log.warn(`the head stopped actor ${m.actorId} incarnation ${m.incarnation}; exiting`);
          process.exit(1);
        }
      },
    });
    try {
      const reg = await conn.request({
        type: 'registerClient',
        kind: opts.kind,
        actorId: opts.actorId,
        incarnation: opts.incarnation,
        jobId: opts.jobId,
        pid: process.pid,
        ...(this.clientId ? { clientId: this.clientId } : {}),
      });
      this.clientId = reg.clientId;
      this.sessionDir = reg.sessionDir;
    } catch (e) {
      conn.close('registration failed');
      throw e;
    }
    return conn;
  }

  /** How long this process keeps reconnecting to a lost head (see `RuntimeOptions.reconnectMs`). */
  get reconnectMs(): number {
    return this.opts.reconnectMs ?? (this.opts.kind === 'driver' ? driverReconnectDefaultMs : 0);
  }

  /** On losing the head: reconnect for up to `reconnectMs`, else report it lost for good. */
  private watchHead(): void {
    const conn = this.head;
    conn.onClose((reason) => {
      if (this.closed || this.head !== conn) return;
      this.headSilent = reason.startsWith('heartbeat timeout');
      const ms = this.reconnectMs;
      if (ms <= 0) {
        log.warn(`lost the head: ${reason}`);
        this.lostForGood(reason);
        return;
      }
      log.warn(`lost the head: ${reason}; reconnecting for up to ${ms} ms`);
      void this.reconnect(Date.now() + ms, reason);
    });
  }

  private async reconnect(deadline: number, reason: string): Promise<void> {
    let delayMs = 100;
    while (!this.closed && Date.now() < deadline) {
      try {
        this.head = await this.connectHead();
        if (this.closed) {
          this.head.close('client shutting down');
          return;
        }
        this.headSilent = false;
        log.info(`reconnected to the head at ${this.opts.headAddress} as ${this.clientId}`);
        this.watchHead();
        for (const w of this.headWaiters.splice(0)) w.resolve(this.head);
        return;
      } catch {
        // Unref'd: a process with nothing else to do may exit rather than wait for the head.
        await new Promise((r) => setTimeout(r, delayMs).unref());
        delayMs = Math.min(delayMs * 2, 1000);
      }
    }
    if (!this.closed)
      this.lostForGood(`${reason}; reconnecting for ${this.reconnectMs} ms gave up`);
  }

  private lostForGood(reason: string): void {
    this.headLostError = new ConnectionError(
      `lost the head at ${this.opts.headAddress} for good: ${reason}`,
    );
    for (const w of this.headWaiters.splice(0)) w.reject(this.headLostError);
    for (const fn of this.headLostHooks) fn(reason);
  }

  /** True once the head is gone and this process stopped reconnecting. */
  get headLostForGood(): boolean {
    return this.headLostError !== undefined;
  }

  /**
   * The head connection once it is up: now, or after the reconnect in progress; rejects with a
   * `ConnectionError` once the head is lost for good.
   */
  headReady(): Promise<Connection> {
    if (this.headLostError) return Promise.reject(this.headLostError);
    if (this.closed) return Promise.reject(new ConnectionError('the runtime is shut down'));
    if (!this.head.closed) return Promise.resolve(this.head);
    return new Promise((resolve, reject) => this.headWaiters.push({ resolve, reject }));
  }

  /**
   * Sends a request that is safe to repeat (a lookup or a wait) to the head, sending it again
   * after a reconnect when the connection drops before the answer.
   */
  async headRequest<B extends IdempotentRequest>(
    body: B,
    opts?: RequestOptions,
  ): Promise<ReplyOf<B['type']>> {
    for (;;) {
      const conn = await this.headReady();
      try {
        return await conn.request(body, opts);
      } catch (e) {
        if (!isRtjobError(e, 'CONNECTION') || !conn.closed || this.closed) throw e;
      }
    }
  }

  /** Called once the head is gone for good (at once without `reconnectMs`). */
  onHeadLost(fn: (reason: string) => void): void {
    this.headLostHooks.push(fn);
  }

  /** `host:port` of this process's endpoint (the owner address of its objects). */
  get address(): string {
    return this.server.address;
  }

  /** A fresh id unique across the cluster. */
  newId(): string {
    return `${this.prefix}${(this.seq++).toString(36)}`;
  }

  /** The client for an actor (one per actor per process). */
  actor(actorId: string, created?: Promise<unknown>, maxTaskRetries = 0): ActorClient {
    let c = this.actorClients.get(actorId);
    if (!c) {
      c = new ActorClient(this, actorId, created, maxTaskRetries);
      this.actorClients.set(actorId, c);
    }
    return c;
  }

  /**
   * Sends a request that must not be repeated (it changes head state) once the head is up: after
   * a reconnect when one is in progress, never twice.
   */
  async headOnce<B extends AnyRequestBody>(body: B): Promise<ReplyOf<B['type']>> {
    return (await this.headReady()).request(body);
  }

  /** Looks up an actor's info at the head. */
  actorInfo(actorId: string): Promise<ActorInfo> {
    return this.headRequest({ type: 'getActorInfo', actorId });
  }

  /** A shared connection to another process's endpoint. */
  peer(address: string): Promise<Connection> {
    let p = this.peers.get(address);
    if (!p) {
      p = connect(address, {
        token: this.opts.token,
        maxFrameBytes: 16 * 1024 * 1024,
        connectTimeoutMs: 5000,
        holdProcess: this.opts.kind !== 'driver',
        accepts: callerAccepts,
        handler: (m) => {
          // Items of a stream the consumer already left are dropped.
          if (m.type === 'streamItem') this.streams.get(m.callId)?.(m);
        },
      }).then((c) => {
        // Lets a peer on this machine hand large values over through shared memory, and count
        // what it serves per node.
        const machine = machineId();
        const node = this.opts.nodeId;
        if (machine || node) {
          c.send({
            type: 'hello',
            ...(machine ? { machine } : {}),
            ...(node ? { node } : {}),
            ...(machine && mapsSharedMemory() ? { map: true } : {}),
          });
        }
        return c;
      });
      this.peers.set(address, p);
      p.then(
        (c) => c.onClose(() => this.peers.get(address) === p && this.peers.delete(address)),
        () => this.peers.get(address) === p && this.peers.delete(address),
      );
    }
    return p;
  }

  /** Registers work to do at `close` (e.g. stopping an in-process cluster). */
  onClose(fn: () => Promise<void> | void): void {
    this.closeHooks.push(fn);
  }

  close(): Promise<void> {
    return holdProcessWhile(this.closeNow());
  }

  private async closeNow(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const down = new ConnectionError('the runtime is shut down');
    for (const w of this.headWaiters.splice(0)) w.reject(down);
    for (const c of this.actorClients.values()) c.shutdown();
    this.head?.close('client shutting down');
    for (const p of this.peers.values())
      p.then(
        (c) => c.close('client shutting down'),
        () => {},
      );
    await this.server.close();
    this.objects.close();
    if (current === this) current = undefined;
    for (const fn of this.closeHooks.reverse()) await fn();
  }

  /** Fetches a remote ref's value from its owner. */
  async fetch(ref: ObjectRef<unknown>): Promise<unknown> {
    let conn: Connection;
    try {
      conn = await this.peer(ref.owner);
    } catch (e) {
      throw new OwnerDiedError(`the owner of object ${ref.id} at ${ref.owner} is gone`, {
        context: { objectId: ref.id },
        cause: e,
      });
    }
    try {
      const v = await conn.request({ type: 'fetch', objectId: ref.id });
      if (!(v instanceof ShmValue)) return v;
      try {
        return await readShm(v);
      } catch (e) {
        log.warn(
          `reading object ${ref.id} from shared memory failed (${(e as Error).message}); fetching it over the socket`,
        );
        return await conn.request({ type: 'fetch', objectId: ref.id, inline: true });
      }
    } catch (e) {
      if (isRtjobError(e, 'CONNECTION')) {
        throw new OwnerDiedError(`the owner of object ${ref.id} at ${ref.owner} died`, {
          context: { objectId: ref.id },
          cause: e,
        });
      }
      throw e;
    }
  }

  private sendBorrow(owner: string, objectId: string, borrow: boolean): void {
    this.peer(owner).then(
      (c) =>
        borrow
          ? c.request({ type: 'borrow', objectId }).catch(() => {})
          : c.send({ type: 'unborrow', objectId }),
      () => {},
    );
  }

  private serve(m: Message, conn: Connection): unknown {
    switch (m.type) {
      case 'call': {
        if (!this.callHandler) throw new ConnectionError('this process hosts no actor');
        const r = this.callHandler(m, conn);
        if (conn.meta.machine === undefined || conn.meta.machine !== machineId()) return r;
        const share = (v: unknown) => shareResult(v, conn.meta.map !== true);
        return isThenable(r) ? r.then(share) : share(r);
      }
      case 'fetch': {
        const sameMachine = conn.meta.machine !== undefined && conn.meta.machine === machineId();
        const node = (conn.meta.node as string | undefined) ?? '';
        return this.objects.serve(
          m.objectId,
          node,
          !m.inline && sameMachine,
          conn.meta.map === true,
        );
      }
      case 'hello':
        conn.meta.machine = m.machine;
        conn.meta.node = m.node;
        conn.meta.map = m.map;
        return undefined;
      case 'objectStats':
        return this.objects.stats();
      case 'streamAck':
        this.callControl?.ack(m.callId, m.consumed);
        return undefined;
      case 'cancelCall':
        this.callControl?.cancel(conn, m.callRid);
        return undefined;
      case 'borrow': {
        // Borrows are remembered per connection so a borrower that dies releases them.
        let held = conn.meta.borrows as Map<string, number> | undefined;
        if (!held) {
          const h = new Map<string, number>();
          conn.meta.borrows = held = h;
          conn.onClose(() => {
            for (const [id, n] of h) for (let i = 0; i < n; i++) this.objects.removeBorrower(id);
          });
        }
        held.set(m.objectId, (held.get(m.objectId) ?? 0) + 1);
        this.objects.addBorrower(m.objectId);
        return true;
      }
      case 'unborrow': {
        const held = conn.meta.borrows as Map<string, number> | undefined;
        const n = held?.get(m.objectId) ?? 0;
        if (n === 0) return undefined; // not borrowed over this connection
        if (n === 1) held!.delete(m.objectId);
        else held!.set(m.objectId, n - 1);
        this.objects.removeBorrower(m.objectId);
        return undefined;
      }
      case 'ping':
        // A caller that meant another actor, or an incarnation this process is not, must not
        // get its calls run here (a reused port, or a replaced incarnation).
        if (
          m.actorId !== undefined &&
          (m.actorId !== this.opts.actorId || m.incarnation !== this.opts.incarnation)
        ) {
          conn.close(`this process is not actor ${m.actorId} incarnation ${m.incarnation}`, 1008);
          return undefined;
        }
        return 'pong';
      default:
        throw new ObjectLostError('unreachable');
    }
  }
}

/**
 * A large call result for a caller on this machine goes through shared memory, read once; the
 * file comes back for reuse (`handBack`) from a caller that copies it, not one that maps it.
 */
function shareResult(v: unknown, handBack: boolean): unknown {
  if (largeBytes(v) < shmMinBytes) return v;
  return writeShm(v, 'result', true, handBack).then(
    (s) => s ?? v,
    () => v,
  );
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return (
    v !== null && typeof v === 'object' && typeof (v as { then?: unknown }).then === 'function'
  );
}
