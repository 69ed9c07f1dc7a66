/**
 * Owner-side object store and reference counting. An object lives while its owner holds a live
 * `ObjectRef` to it (tracked with a `FinalizationRegistry`, or ended early with `release`), while
 * other processes borrow it, and for a grace period after each time it was sent to another
 * process (so the receiver's borrow always lands before the owner could free it). Other
 * processes count their own borrowed refs the same way and tell the owner when they are done.
 *
 * Large values (typed arrays, see `largeBytes`) count against the store's memory cap; past it the
 * least recently used are spilled to disk (`spill.ts`) and come back on the next get or fetch.
 *
 * @module
 */
import { totalmem } from 'node:os';
import { readEnv } from '../env.ts';
import { ObjectLostError } from '../errors.ts';
import { logger } from '../log.ts';
import { Immutable, largeBytes } from '../out-of-band.ts';
import type { FetchesServed, ObjectStoreStats } from '../protocol.ts';
import { ObjectRef } from './object-ref.ts';
import { ShmValue, removeShm, removeShmFilesOf, shmMinBytes, shmReads, writeShm } from './shm.ts';
import {
  type SpillFile,
  openSpillDir,
  readSpill,
  removeSpill,
  removeSpillFilesOf,
  writeSpill,
  writeSpillSync,
} from './spill.ts';

const log = logger('objects');

/** Options for the store. */
export interface ObjectStoreOptions {
  /** How long an object is kept after being sent to another process. @default 30000 */
  transferHoldMs?: number;
  /**
   * Bytes of large values (typed arrays of 64 KiB or more) kept in memory; past it the least
   * recently used objects are spilled to disk and restored on their next get.
   * @default RTJOB_OBJECT_STORE_MEMORY, else 30% of the machine's memory
   */
  memoryBytes?: number;
}

/** Removes the shared-memory and spill files of process `pid`, which died without doing so. */
export function removeObjectFilesOf(pid: number): void {
  removeShmFilesOf(pid);
  removeSpillFilesOf(pid);
}

/** The default cap of a store: 30% of the machine's memory (Ray's default object store size). */
export function defaultObjectStoreMemory(): number {
  return Math.floor(totalmem() * 0.3);
}

interface Entry {
  /** A ref that holds the value (kept out of user hands so the registry can see theirs die). */
  holder: ObjectRef<unknown>;
  local: number;
  borrowers: number;
  holdUntilMs: number;
  bytes: number;
  /** Nodes of this machine (`''`: a driver) that fetched the value so far. */
  fetchedBy?: Set<string>;
  /** The value in shared memory, written on the second same-machine fetch (then reused). */
  shm?: Promise<unknown>;
  /** A reader that maps fetched it (and may map the file): the file is never reused. */
  shmMapped?: boolean;
  /** When the value was last put, got or served (for spilling the least recently used). */
  usedMs: number;
  /** Refs of this process that hold the value, to drop it from when it is spilled. */
  refs?: Set<WeakRef<ObjectRef<unknown>>>;
  /** The value's file once spilled (kept until the object is freed: the value never changes). */
  spill?: SpillFile;
  /** A write of the value to disk under way (the value stays in memory until it is done). */
  spilling?: Promise<void>;
  /** A restore from disk under way. */
  restoring?: Promise<unknown>;
}

interface Borrowed {
  owner: string;
  count: number;
  lastSentMs: number;
}

/** Sends a one-way borrow/unborrow message to an owner. */
export type BorrowSender = (owner: string, objectId: string, borrow: boolean) => void;

/** Counts references for one process: objects it owns, and objects it borrows. */
export class ObjectStore {
  private readonly entries = new Map<string, Entry>();
  private readonly borrowed = new Map<string, Borrowed>();
  private readonly holdMs: number;
  private readonly ownedRegistry = new FinalizationRegistry<string>((id) => this.dropLocal(id));
  private readonly borrowRegistry = new FinalizationRegistry<string>((id) => this.dropBorrow(id));
  private readonly released = new WeakSet<ObjectRef<unknown>>();
  private timer: NodeJS.Timeout | undefined;
  /** Fetches served, by fetching node. */
  private readonly served = new Map<string, { socket: number; sharedMemory: number }>();
  private readonly capBytes: number;
  private spills = 0;
  private restores = 0;
  /** Spill writes under way, freed objects' included. */
  private readonly writes = new Set<Promise<void>>();

  constructor(
    readonly address: string,
    private readonly sendBorrow: BorrowSender,
    opts: ObjectStoreOptions = {},
  ) {
    this.holdMs = opts.transferHoldMs ?? 30_000;
    this.capBytes =
      opts.memoryBytes ?? readEnv('RTJOB_OBJECT_STORE_MEMORY') ?? defaultObjectStoreMemory();
    // Sweeps what processes that are gone spilled (a killed driver, a restarted node's workers).
    openSpillDir();
  }

  /** What this store holds and the fetches it has served (what `objectStats` answers). */
  stats(): ObjectStoreStats {
    const fetchesServed: FetchesServed[] = [...this.served].map(([node, n]) => ({ node, ...n }));
    let spilledObjects = 0;
    let spilledBytes = 0;
    let heldBytes = 0;
    let spillsInFlight = 0;
    for (const e of this.entries.values()) {
      if (e.spill) {
        spilledObjects++;
        spilledBytes += e.spill.bytes;
      }
      if (e.spilling) spillsInFlight++;
      if (!isLive(e) && e.holder.isSettled) heldBytes += e.bytes;
    }
    return {
      owned: this.entries.size,
      borrowed: this.borrowed.size,
      fetchesServed,
      memoryBytes: bytesOf(this.inMemory()),
      heldBytes,
      memoryCapBytes: this.capBytes,
      spilledObjects,
      spilledBytes,
      spills: this.spills,
      spillsInFlight,
      restores: this.restores,
      sharedMemoryReads: shmReads(),
    };
  }

  /**
   * Serves a fetch from a process on `node` (`''`: on none), through shared memory when `shared`
   * (a peer on this machine, which `maps` the files it is given or reads them), and counts it
   * once the value is there. A value goes back as `Immutable`: an object never changes once
   * stored, so its arrays go to the socket uncopied.
   */
  serve(id: string, node: string, shared: boolean, maps = false): Promise<unknown> | unknown {
    const v = shared ? this.fetchShared(id, node, maps) : this.fetch(id);
    const count = (value: unknown) => {
      let n = this.served.get(node);
      if (!n) this.served.set(node, (n = { socket: 0, sharedMemory: 0 }));
      if (value instanceof ShmValue) {
        n.sharedMemory++;
        return value;
      }
      n.socket++;
      return new Immutable(value);
    };
    return v instanceof Promise ? v.then(count) : count(v);
  }

  /** True while the object is stored here. */
  has(id: string): boolean {
    return this.entries.has(id);
  }

  /** Stores a value owned by this process and returns the user's ref to it. */
  put<T>(id: string, value: T): ObjectRef<T> {
    const holder = ObjectRef.resolved(id, this.address, value);
    const e: Entry = { holder, local: 0, borrowers: 0, holdUntilMs: 0, bytes: 0, usedMs: 0 };
    this.entries.set(id, e);
    const ref = ObjectRef.resolved(id, this.address, value);
    this.trackLocal(ref);
    this.account(id, e, value, ref as ObjectRef<unknown>);
    return ref;
  }

  /** Called when an owned ref is about to be sent away: make sure it is served and held. */
  onSend(ref: ObjectRef<unknown>): void {
    if (ref.owner !== this.address) {
      const b = this.borrowed.get(ref.id);
      if (b) b.lastSentMs = Date.now();
      return;
    }
    let e = this.entries.get(ref.id);
    if (!e) {
      if (ref._released) return;
      // A call result first sent somewhere: its ref becomes the entry's holder of the value.
      const holder = new ObjectRef<unknown>(ref.id, this.address);
      const entry: Entry = { holder, local: 0, borrowers: 0, holdUntilMs: 0, bytes: 0, usedMs: 0 };
      ref._onSettled((r) => {
        if (!r.isSettled) return;
        settleFrom(holder, r);
        if (this.entries.get(r.id) === entry && !r._spilled) this.account(r.id, entry, r._value, r);
      });
      e = entry;
      this.entries.set(ref.id, e);
      this.trackLocal(ref);
    }
    e.holdUntilMs = Date.now() + this.holdMs;
    this.armSweep();
  }

  /** A ref decoded from the wire: an owned one counts locally, a foreign one is borrowed. */
  adopt(id: string, owner: string): ObjectRef<unknown> {
    if (owner === this.address) {
      const e = this.entries.get(id);
      const ref = new ObjectRef<unknown>(id, owner);
      if (!e) {
        ref._reject(
          new ObjectLostError(`object ${id} was freed by its owner`, { context: { objectId: id } }),
        );
        return ref;
      }
      if (e.holder._spilled) ref._spill(() => this.restore(id), true);
      else e.holder._onSettled((h) => settleFrom(ref, h));
      e.refs?.add(new WeakRef(ref));
      this.trackLocal(ref);
      return ref;
    }
    const ref = new ObjectRef<unknown>(id, owner, true);
    const b = this.borrowed.get(id);
    if (b) b.count++;
    else {
      this.borrowed.set(id, { owner, count: 1, lastSentMs: 0 });
      this.sendBorrow(owner, id, true);
    }
    this.borrowRegistry.register(ref, id, ref);
    return ref;
  }

  /** Serves a fetch: the value, waiting for it if it is still being computed. */
  fetch(id: string): Promise<unknown> | unknown {
    const e = this.entries.get(id);
    if (!e)
      throw new ObjectLostError(`object ${id} is not stored at ${this.address}`, {
        context: { objectId: id },
      });
    e.usedMs = Date.now();
    const h = e.holder;
    if (h.isSettled) return h._take();
    return new Promise((resolve, reject) =>
      h._onSettled((r) => {
        try {
          resolve(r._take());
        } catch (err) {
          reject(err);
        }
      }),
    );
  }

  /**
   * Serves a fetch from a process on this machine, of node `node` (which `maps` the files it is
   * given, or copies them). The first from each node gets a large value over the socket: one
   * copy into a reused buffer and the kernel's, where a file costs a copy into fresh tmpfs pages
   * (their allocation and release are half of it) before any reader saves anything. A second
   * fetch from a node means the object is shared there: it goes through shared memory, written
   * once however many more processes of the machine fetch it, and mapped by those that map.
   */
  fetchShared(id: string, node: string, maps: boolean): Promise<unknown> | unknown {
    const e = this.entries.get(id);
    if (!e) return this.fetch(id);
    e.usedMs = Date.now();
    if (maps) e.shmMapped = true;
    if (e.shm) return e.shm;
    const h = e.holder;
    if (!h.isSettled) {
      return new Promise((resolve) =>
        h._onSettled(() => resolve(this.fetchShared(id, node, maps))),
      );
    }
    const value = h._take();
    if (largeBytes(value) < shmMinBytes) return value;
    const by = (e.fetchedBy ??= new Set());
    if (!by.has(node)) {
      by.add(node);
      return value;
    }
    e.shm = writeShm(value, id, false).then(
      (s) => s ?? value,
      () => value,
    );
    return e.shm;
  }

  addBorrower(id: string): void {
    const e = this.entries.get(id);
    if (e) e.borrowers++;
  }

  removeBorrower(id: string): void {
    const e = this.entries.get(id);
    if (!e) return;
    e.borrowers = Math.max(0, e.borrowers - 1);
    this.maybeFree(id, e);
  }

  /** Drops this ref's claim now instead of at garbage collection. */
  release(ref: ObjectRef<unknown>): void {
    if (this.released.has(ref)) return;
    this.released.add(ref);
    ref._released = true;
    if (ref.owner === this.address) {
      if (this.ownedRegistry.unregister(ref)) this.dropLocal(ref.id);
    } else if (this.borrowRegistry.unregister(ref)) {
      this.dropBorrow(ref.id);
    }
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    for (const e of this.entries.values()) this.dropFiles(e);
    this.entries.clear();
    this.borrowed.clear();
  }

  private trackLocal(ref: ObjectRef<unknown>): void {
    const e = this.entries.get(ref.id);
    if (!e) return;
    e.local++;
    this.ownedRegistry.register(ref, ref.id, ref);
  }

  private dropLocal(id: string): void {
    const e = this.entries.get(id);
    if (!e) return;
    e.local = Math.max(0, e.local - 1);
    this.maybeFree(id, e);
  }

  private dropBorrow(id: string): void {
    const b = this.borrowed.get(id);
    if (!b) return;
    b.count--;
    if (b.count > 0) return;
    const wait = b.lastSentMs + this.holdMs - Date.now();
    const done = () => {
      if (this.borrowed.get(id) !== b || b.count > 0) return;
      this.borrowed.delete(id);
      this.sendBorrow(b.owner, id, false);
    };
    if (wait > 0) setTimeout(done, wait).unref();
    else done();
  }

  private maybeFree(id: string, e: Entry): void {
    if (e.local > 0 || e.borrowers > 0) return;
    if (e.holdUntilMs > Date.now()) {
      this.armSweep();
      return;
    }
    this.entries.delete(id);
    this.dropFiles(e);
  }

  /**
   * Counts a new value of entry `id` against the cap (when it has large arrays), with `ref`
   * holding it, and spills what the cap no longer has room for.
   */
  private account(id: string, e: Entry, value: unknown, ref: ObjectRef<unknown>): void {
    const bytes = largeBytes(value);
    if (bytes === 0) return;
    e.bytes = bytes;
    e.usedMs = Date.now();
    e.refs = new Set([new WeakRef(ref)]);
    this.enforceCap();
  }

  /**
   * Live objects whose large values are in memory: what the cap bounds. An object kept only for
   * the hold after a transfer (no ref, no borrower) is left out: it goes within the hold.
   */
  private inMemory(): [string, Entry][] {
    const out: [string, Entry][] = [];
    for (const kv of this.entries) {
      const e = kv[1];
      if (e.bytes > 0 && e.holder.isSettled && isLive(e)) out.push(kv);
    }
    return out;
  }

  /**
   * Spills the least recently used values until the large values in memory fit the cap, counting
   * those being written as gone: each is dropped from memory once its file is complete (and this
   * runs again then). Writes go off the caller's thread, but for one that would take the bytes
   * in flight past the cap: that one is written before the put returns, so a producer faster
   * than the disk holds at most about twice the cap.
   */
  private enforceCap(): void {
    const live = this.inMemory();
    let bytes = bytesOf(live);
    if (bytes <= this.capBytes) return;
    let inFlight = 0;
    for (const [, e] of live) if (e.spilling) inFlight += e.bytes;
    live.sort(([, a], [, b]) => a.usedMs - b.usedMs);
    for (const [id, e] of live) {
      if (bytes <= this.capBytes) return;
      if (e.spilling) {
        bytes -= e.bytes;
        continue;
      }
      const wait = !e.spill && inFlight + e.bytes > this.capBytes;
      if (!this.spill(id, e, wait)) continue;
      bytes -= e.bytes;
      if (e.spilling) inFlight += e.bytes;
    }
  }

  /**
   * Drops entry `id`'s value from every ref of this process once it is on disk: at once when its
   * file exists (written before, or now when `wait`), else after a write this starts. False when
   * it stays in memory (a failed result, no spill directory, a failed write).
   */
  private spill(id: string, e: Entry, wait: boolean): boolean {
    let value: unknown;
    try {
      value = e.holder._take();
    } catch {
      return false; // a failed result holds an error, not a value
    }
    if (!e.spill) {
      if (!openSpillDir()) return false;
      if (!wait) {
        const w = writeSpill(value, id).then(
          (f) => this.spilled(id, e, f),
          (err: unknown) => this.spilled(id, e, undefined, err),
        );
        e.spilling = w;
        this.writes.add(w);
        void w.finally(() => this.writes.delete(w));
        return true;
      }
      try {
        const f = writeSpillSync(value, id);
        if (!f) return false;
        e.spill = f;
        this.spills++;
      } catch (err) {
        log.warn(`cannot spill object ${id}: ${(err as Error).message}; it stays in memory`);
        return false;
      }
    }
    const restore = () => this.restore(id);
    e.holder._spill(restore);
    for (const w of e.refs ?? []) {
      const r = w.deref();
      if (r) r._spill(restore);
      else e.refs!.delete(w);
    }
    if (e.shm) {
      // Shared memory is memory too. Removed, never reused: a reader may be reading it now (and
      // keeps its pages, as does one that mapped it); the next fetch writes it again.
      void e.shm.then((v) => (v instanceof ShmValue ? removeShm(v.name, false) : undefined));
      e.shm = undefined;
    }
    return true;
  }

  /** A write `spill` started is done: `f` is the file, or `err` why there is none. */
  private async spilled(
    id: string,
    e: Entry,
    f: SpillFile | undefined,
    err?: unknown,
  ): Promise<void> {
    e.spilling = undefined;
    if (err !== undefined) {
      log.warn(`cannot spill object ${id}: ${(err as Error).message}; it stays in memory`);
      return;
    }
    if (!f) return;
    if (this.entries.get(id) !== e) {
      await removeSpill(f.path); // freed (or the store closed) while it was written
      return;
    }
    e.spill = f;
    this.spills++;
    this.enforceCap();
  }

  /** Resolves once no spill write is under way, nor started by one that ended (tests). */
  async spillsSettled(): Promise<void> {
    while (this.writes.size) await Promise.all(this.writes);
  }

  /** Reads entry `id`'s spilled value back into memory; what every spilled ref of it waits on. */
  private restore(id: string): Promise<unknown> {
    const e = this.entries.get(id);
    if (!e?.spill) {
      return Promise.reject(
        new ObjectLostError(`object ${id} was freed by its owner`, { context: { objectId: id } }),
      );
    }
    if (!e.holder._spilled) return Promise.resolve(e.holder._take());
    e.restoring ??= readSpill(e.spill).then(
      (value) => {
        e.restoring = undefined;
        if (this.entries.get(id) !== e) return value;
        this.restores++;
        e.holder._resolve(value);
        e.usedMs = Date.now();
        this.enforceCap();
        return value;
      },
      (err: unknown) => {
        e.restoring = undefined;
        throw new ObjectLostError(`object ${id} could not be read back from disk`, {
          context: { objectId: id },
          cause: err,
        });
      },
    );
    return e.restoring;
  }

  /** Gives back a freed entry's files: shared memory and spilled. */
  private dropFiles(e: Entry): void {
    dropShm(e);
    if (e.spill) void removeSpill(e.spill.path);
  }

  /** Frees held objects once their hold has passed. */
  private armSweep(): void {
    if (this.timer) return;
    this.timer = setInterval(
      () => {
        const now = Date.now();
        let held = 0;
        for (const [id, e] of this.entries) {
          if (e.holdUntilMs > now) held++;
          else if (e.local === 0 && e.borrowers === 0) {
            this.entries.delete(id);
            this.dropFiles(e);
          }
        }
        if (held === 0 && this.timer) {
          clearInterval(this.timer);
          this.timer = undefined;
        }
      },
      Math.max(50, Math.min(1000, this.holdMs / 2)),
    );
    this.timer.unref();
  }
}

/** Whether an object has a ref or a borrower (not only the hold after a transfer). */
function isLive(e: Entry): boolean {
  return e.local > 0 || e.borrowers > 0;
}

function bytesOf(entries: [string, Entry][]): number {
  let n = 0;
  for (const [, e] of entries) n += e.bytes;
  return n;
}

function dropShm(e: Entry): void {
  void e.shm?.then((v) => (v instanceof ShmValue ? removeShm(v.name, !e.shmMapped) : undefined));
}

function settleFrom(target: ObjectRef<unknown>, source: ObjectRef<unknown>): void {
  try {
    target._resolve(source._take());
  } catch (e) {
    target._reject(e);
  }
}
