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
import { type ActorInfo, type Call, type Message, acceptedBy } from '../protocol.ts';
import { type Connection, type Server, connect, holdProcessWhile, listen } from '../transport.ts';
import { ActorClient } from './actor-client.ts';
import { type ObjectRef, setRefFetcher } from './object-ref.ts';
import { ObjectStore } from './object-store.ts';

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
  /**
   * After losing the head, keep trying to reconnect (and resume this client id) this long, for a
   * head that restarts on the same session. 0 gives up at once. @default 0
   */
  reconnectMs?: number;
}

const dataAccepts = acceptedBy('data');

let current: Runtime | undefined;

/** The runtime of this process, if started. */
export function currentRuntime(): Runtime | undefined {
  return current;
}

/** One process's view of the cluster. */
export class Runtime {
  head!: Connection;
  server!: Server;
  clientId = '';
  sessionDir: string | undefined;
  objects!: ObjectStore;
  /** Set by a worker hosting an actor. */
  callHandler: ((msg: Call, conn: Connection) => unknown) | undefined;
  readonly jobId: string | undefined;
  private readonly peers = new Map<string, Promise<Connection>>();
  private readonly actorClients = new Map<string, ActorClient>();
  private readonly prefix = randomBytes(5).toString('hex');
  private seq = 0;
  private closed = false;
  private readonly closeHooks: (() => Promise<void> | void)[] = [];
  private readonly headLostHooks: ((reason: string) => void)[] = [];

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
      { transferHoldMs: opts.objectTransferHoldMs },
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

  /** On losing the head: reconnect for up to `reconnectMs`, else report it lost for good. */
  private watchHead(): void {
    const conn = this.head;
    conn.onClose((reason) => {
      if (this.closed || this.head !== conn) return;
      const ms = this.opts.reconnectMs ?? 0;
      if (ms <= 0) {
        log.warn(`lost the head: ${reason}`);
        for (const fn of this.headLostHooks) fn(reason);
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
        log.info(`reconnected to the head at ${this.opts.headAddress} as ${this.clientId}`);
        this.watchHead();
        return;
      } catch {
        // Unref'd: a process with nothing else to do may exit rather than wait for the head.
        await new Promise((r) => setTimeout(r, delayMs).unref());
        delayMs = Math.min(delayMs * 2, 1000);
      }
    }
    if (!this.closed) for (const fn of this.headLostHooks) fn(`${reason}; reconnecting gave up`);
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

  /** Looks up an actor's info at the head. */
  actorInfo(actorId: string): Promise<ActorInfo> {
    return this.head.request({ type: 'getActorInfo', actorId });
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
    for (const c of this.actorClients.values()) c.shutdown();
    this.head?.close('client shutting down');
    for (const p of this.peers.values()) p.then((c) => c.close('client shutting down'), () => {});
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
      return await conn.request({ type: 'fetch', objectId: ref.id });
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
      (c) => (borrow ? c.request({ type: 'borrow', objectId }).catch(() => {}) : c.send({ type: 'unborrow', objectId })),
      () => {},
    );
  }

  private serve(m: Message, conn: Connection): unknown {
    switch (m.type) {
      case 'call':
        if (!this.callHandler) throw new ConnectionError('this process hosts no actor');
        return this.callHandler(m, conn);
      case 'fetch':
        return this.objects.fetch(m.objectId);
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
        return 'pong';
      default:
        throw new ObjectLostError('unreachable');
    }
  }
}
