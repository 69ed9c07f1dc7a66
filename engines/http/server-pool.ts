/**
 * The set of inference servers one engine talks to: load-aware routing, `rid` pinning (an
 * episode's turns go to the server that holds its prefix in cache), health polling and failover.
 *
 * A server is `up` or `down`. It goes down after `failureThreshold` consecutive failed health
 * probes (a failed request counts as one and triggers a probe at once); every request in flight
 * to it is then cancelled with an `EngineError` of code `server-down` so that the caller re-sends
 * it elsewhere. A down server keeps being probed and comes back up once a probe succeeds and the
 * `beforeUp` hook (used to re-apply the latest weights) has run.
 *
 * @module
 */
import { EngineError } from './errors.ts';
import { httpCall } from './http-call.ts';

/** A change in a server's state, told to listeners. */
export interface ServerEvent {
  type: 'server-down' | 'server-up';
  url: string;
  /** Why it went down. */
  reason?: string;
  /** `Date.now()` when it happened. */
  atMs: number;
}

/** One server's state, as {@link ServerPool.snapshot} reports it. */
export interface ServerStatus {
  url: string;
  state: 'up' | 'down';
  inFlight: number;
  consecutiveFailures: number;
  /** Requests routed to it so far. */
  routed: number;
}

/** Options of a {@link ServerPool}. */
export interface ServerPoolOptions {
  /** Base URLs such as `http://10.0.0.5:30000` (a trailing slash is dropped). */
  urls: string[];
  /** Health route, answered 200 by a live server. @default '/health' */
  healthPath?: string;
  /** Time between health probes of each server. @default 5000 */
  healthIntervalMs?: number;
  /** A probe that takes longer fails. @default 5000 */
  healthTimeoutMs?: number;
  /** Consecutive failures that mark a server down. @default 2 */
  failureThreshold?: number;
  /** How many `rid → server` pins are remembered (least recently used are forgotten). @default 10000 */
  pinCapacity?: number;
  /** Runs before a recovered server is marked up (e.g. load the current weights); failing keeps it down. */
  beforeUp?: (url: string) => Promise<void>;
}

/** Defaults of {@link ServerPoolOptions}. */
export const serverPoolDefaults = {
  healthPath: '/health',
  healthIntervalMs: 5000,
  healthTimeoutMs: 5000,
  failureThreshold: 2,
  pinCapacity: 10_000,
} as const;

interface Server {
  url: string;
  state: 'up' | 'down';
  inFlight: Set<AbortController>;
  /** Control calls (reload, pause, sleep): cancelled with the requests, not counted as load. */
  watched: Set<AbortController>;
  consecutiveFailures: number;
  routed: number;
  probing: Promise<void> | null;
}

/** A lease on a server for one request; call `release` when the request settles. */
export interface ServerLease {
  url: string;
  /** Aborted with an `EngineError('SERVER_DOWN')` if the server is marked down meanwhile. */
  signal: AbortSignal;
  release(): void;
}

/** Routes requests across servers and watches their health. */
export class ServerPool {
  private readonly servers: Server[];
  private readonly pins = new Map<string, Server>();
  private readonly listeners = new Set<(e: ServerEvent) => void>();
  private readonly upWaiters = new Set<() => void>();
  private readonly opts: Required<Omit<ServerPoolOptions, 'beforeUp'>> &
    Pick<ServerPoolOptions, 'beforeUp'>;
  private timer: NodeJS.Timeout | null = null;
  private rr = 0;
  private closed = false;

  constructor(options: ServerPoolOptions) {
    if (options.urls.length === 0) throw new EngineError('CONFIG', 'no server URLs given');
    this.opts = { ...serverPoolDefaults, ...options };
    this.servers = [...new Set(options.urls.map((u) => u.replace(/\/+$/, '')))].map((url) => ({
      url,
      state: 'up',
      inFlight: new Set(),
      watched: new Set(),
      consecutiveFailures: 0,
      routed: 0,
      probing: null,
    }));
  }

  /** Starts polling `/health` on every server. */
  start(): void {
    if (this.timer || this.closed) return;
    this.timer = setInterval(() => {
      for (const s of this.servers) void this.probe(s);
    }, this.opts.healthIntervalMs);
    this.timer.unref();
  }

  /** Every server URL, in the order given. */
  get urls(): string[] {
    return this.servers.map((s) => s.url);
  }

  /** URLs of servers that are up now. */
  upUrls(): string[] {
    return this.servers.filter((s) => s.state === 'up').map((s) => s.url);
  }

  /** Listens for servers going down or up; returns the function that stops listening. */
  onEvent(listener: (e: ServerEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Picks a server for a request: the one `rid` is pinned to while it is up, else the up server
   * with the fewest requests in flight (ties broken round-robin), which `rid` is then pinned to.
   * Waits up to `waitMs` for a server to come up when none is.
   */
  async acquire(rid: string | undefined, waitMs: number): Promise<ServerLease> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      if (this.closed) throw new EngineError('CLOSED', 'the engine is closed');
      const server = this.pick(rid);
      if (server) return this.lease(server);
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new EngineError('NO_SERVER', `no server is up among ${this.urls.join(', ')}`);
      }
      for (const s of this.servers) void this.probe(s);
      await this.waitForUp(Math.min(left, this.opts.healthIntervalMs));
    }
  }

  /**
   * A signal for a control call to `url` (weight reload, pause, sleep) that aborts with an
   * `EngineError('SERVER_DOWN')` if the server is marked down meanwhile, so a call to a server
   * that stopped answering ends with its health checks rather than at its own time limit.
   */
  watch(url: string): { signal: AbortSignal; release(): void } {
    const s = this.servers.find((x) => x.url === url);
    const controller = new AbortController();
    if (!s) return { signal: controller.signal, release: () => undefined };
    s.watched.add(controller);
    return { signal: controller.signal, release: () => s.watched.delete(controller) };
  }

  /** Reports that a request to `url` failed at the connection level; probes the server at once. */
  reportFailure(url: string, reason: string): void {
    const s = this.servers.find((x) => x.url === url);
    if (!s || s.state === 'down') return;
    s.consecutiveFailures += 1;
    if (s.consecutiveFailures >= this.opts.failureThreshold) this.markDown(s, reason);
    else void this.probe(s);
  }

  /** Marks `url` down now (for example after a failed weight update). */
  markDownUrl(url: string, reason: string): void {
    const s = this.servers.find((x) => x.url === url);
    if (s && s.state === 'up') this.markDown(s, reason);
  }

  /** Probes every server once and waits for the probes to finish. */
  async checkAll(): Promise<void> {
    await Promise.all(this.servers.map((s) => this.probe(s)));
  }

  /** Each server's state. */
  snapshot(): ServerStatus[] {
    return this.servers.map((s) => ({
      url: s.url,
      state: s.state,
      inFlight: s.inFlight.size,
      consecutiveFailures: s.consecutiveFailures,
      routed: s.routed,
    }));
  }

  /** Stops polling and cancels everything in flight. */
  close(): void {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    const err = new EngineError('CLOSED', 'the engine is closed');
    for (const s of this.servers) for (const c of [...s.inFlight, ...s.watched]) c.abort(err);
    for (const w of this.upWaiters) w();
  }

  private pick(rid: string | undefined): Server | undefined {
    if (rid !== undefined) {
      const pinned = this.pins.get(rid);
      if (pinned && pinned.state === 'up') {
        this.pins.delete(rid);
        this.pins.set(rid, pinned);
        return pinned;
      }
    }
    let best: Server | undefined;
    const n = this.servers.length;
    for (let i = 0; i < n; i++) {
      const s = this.servers[(this.rr + i) % n]!;
      if (s.state !== 'up') continue;
      if (!best || s.inFlight.size < best.inFlight.size) best = s;
    }
    if (!best) return undefined;
    this.rr = (this.servers.indexOf(best) + 1) % n;
    if (rid !== undefined) {
      this.pins.delete(rid);
      this.pins.set(rid, best);
      if (this.pins.size > this.opts.pinCapacity) {
        this.pins.delete(this.pins.keys().next().value as string);
      }
    }
    return best;
  }

  private lease(s: Server): ServerLease {
    const controller = new AbortController();
    s.inFlight.add(controller);
    s.routed += 1;
    return {
      url: s.url,
      signal: controller.signal,
      release: () => {
        s.inFlight.delete(controller);
      },
    };
  }

  private waitForUp(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.upWaiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.upWaiters.add(done);
    });
  }

  private probe(s: Server): Promise<void> {
    if (this.closed) return Promise.resolve();
    s.probing ??= this.runProbe(s).finally(() => {
      s.probing = null;
    });
    return s.probing;
  }

  private async runProbe(s: Server): Promise<void> {
    let ok = false;
    let reason = '';
    try {
      await httpCall(s.url + this.opts.healthPath, undefined, {
        timeoutMs: this.opts.healthTimeoutMs,
      });
      ok = true;
    } catch (e) {
      reason = (e as Error).message;
    }
    if (this.closed) return;
    if (!ok) {
      s.consecutiveFailures += 1;
      if (s.state === 'up' && s.consecutiveFailures >= this.opts.failureThreshold) {
        this.markDown(s, reason);
      }
      return;
    }
    s.consecutiveFailures = 0;
    if (s.state === 'down') {
      try {
        await this.opts.beforeUp?.(s.url);
      } catch {
        // Stays down; the next probe tries again.
        s.consecutiveFailures = this.opts.failureThreshold;
        return;
      }
      if (this.closed) return;
      s.state = 'up';
      this.emit({ type: 'server-up', url: s.url });
      for (const w of [...this.upWaiters]) w();
    }
  }

  private markDown(s: Server, reason: string): void {
    s.state = 'down';
    const err = new EngineError('SERVER_DOWN', `server ${s.url} is down: ${reason}`, {
      url: s.url,
    });
    for (const c of [...s.inFlight, ...s.watched]) c.abort(err);
    s.inFlight.clear();
    s.watched.clear();
    this.emit({ type: 'server-down', url: s.url, reason });
  }

  private emit(e: Omit<ServerEvent, 'atMs'>): void {
    const event = { ...e, atMs: Date.now() };
    for (const l of this.listeners) {
      try {
        l(event);
      } catch {
        // A listener's failure must not stop routing.
      }
    }
  }
}
