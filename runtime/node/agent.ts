/**
 * The node agent: one per machine. It registers the machine's resources with the head, starts
 * one worker process per actor the head places here (with rtjob's cached TypeScript loader, the job's env and,
 * on a node that declares GPUs, `CUDA_VISIBLE_DEVICES` for exactly its GPUs), writes each worker's stdout/stderr to log files in
 * the session dir, and reports every exit with its code, signal and last stderr lines.
 *
 * @module
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { type WriteStream, createWriteStream, mkdirSync, mkdtempSync } from 'node:fs';
import { cpus, hostname, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { isPackageHash, packagesDir } from '../packages/working-dir.ts';
import { isRtjobError } from '../errors.ts';
import { removeObjectFilesOf } from '../client/object-store.ts';
import { logger } from '../log.ts';
import {
  type MemoryKill,
  type Message,
  type ResourceMap,
  type StartWorker,
  type WorkerExited,
  acceptedBy,
} from '../protocol.ts';
import { type Connection, connect } from '../transport.ts';
import {
  MemoryMonitor,
  type MemoryReading,
  memoryMonitorDefaults,
  rssOf,
} from './memory-monitor.ts';
import { LogShipper } from './log-shipper.ts';
import { NodePackages } from './packages.ts';
import { UsageSampler } from './usage.ts';
import { assignMessage, withLargePages, workerArgv, workerEnv } from './worker-env.ts';

const log = logger('node');

/** Options for `startNodeAgent`. */
export interface NodeAgentOptions {
  /** The head's `host:port`. */
  headAddress: string;
  /** The cluster token. */
  token: string;
  /** Where worker logs go (`<sessionDir>/logs`). @default a fresh temp dir */
  sessionDir?: string;
  /** Interface the workers on this node serve calls on. @default '127.0.0.1' */
  host?: string;
  /** @default the number of CPU cores */
  numCpus?: number;
  /** @default 0 */
  numGpus?: number;
  /** Schedulable memory in bytes. @default 70% of physical memory */
  memoryBytes?: number;
  /** Custom resources, e.g. `{ accelerator_x: 2 }`. @default {} */
  resources?: ResourceMap;
  /** Extra environment for every worker on this node. @default {} */
  env?: Record<string, string>;
  /** Lines of stderr kept for exit reports. @default 30 */
  stderrTailLines?: number;
  /** The head is declared lost after this much silence. @default 10000 */
  heartbeatTimeoutMs?: number;
  /**
   * Whether this agent's connection and worker processes keep the process alive; false for an
   * agent that `init()` starts inside a driver. @default true
   */
  holdProcess?: boolean;
  /**
   * Workers starting at once (importing tsx and the user's module is CPU-bound); the rest wait
   * their turn, which keeps a burst of actor creations from thrashing a small machine.
   * @default the number of CPU cores, at least 2
   */
  maxStartingWorkers?: number;
  /**
   * Worker processes kept booted (Node, the TypeScript loader and the runtime loaded) and idle,
   * so creating an actor costs only its own module import and constructor. The pool is refilled
   * in the background whenever no other worker is starting. @default 1
   */
  warmWorkers?: number;
  /**
   * How workers load TypeScript: `'cached'` uses rtjob's hooks with a content-addressed transform
   * cache shared by the node's workers (about half of tsx's start-up CPU and memory); `'tsx'`
   * uses tsx (also honours `tsconfig` paths). @default 'cached', or `RTJOB_WORKER_LOADER`
   */
  workerLoader?: 'cached' | 'tsx';
  /**
   * After losing the head, keep the workers running and try to reconnect this long (a head that
   * restarts on the same session re-attaches them with their state). 0 stops every worker at
   * once. Workers get the same window for their own connection. @default 0
   */
  reconnectMs?: number;
  /**
   * Also send every worker's stdout/stderr to the head as it is written (a node on another
   * machine), so its logs outlive this node. @default false
   */
  shipLogs?: boolean;
  /** How often new log bytes are shipped. @default 500 */
  shipLogsIntervalMs?: number;
  /**
   * How often the machine's and each worker's CPU and memory use go to the head (`nodeStats`,
   * for the dashboard and `rtjob status`); 0 sends none. @default 2000
   */
  statsIntervalMs?: number;
  /**
   * Share of memory in use (of this agent's cgroup when it has a limit, else of the machine)
   * past which the memory monitor kills the most recently started worker, before the kernel's
   * OOM killer strikes; its actor's callers get `OutOfMemoryError` (Ray's
   * `memory_usage_threshold`). 1 turns the monitor off. @default 0.95
   */
  memoryUsageThreshold?: number;
  /** How often the memory monitor reads memory in use; 0 turns it off. @default 250 */
  memoryMonitorIntervalMs?: number;
  /** @internal Reads memory in use (tests). @default cgroup or `/proc/meminfo` */
  readMemory?: () => MemoryReading;
}

/** One running worker. */
export interface WorkerProcess {
  readonly actorId: string;
  readonly incarnation: number;
  readonly pid: number;
  readonly logFiles: { stdout: string; stderr: string };
}

export interface NodeAgentEvents {
  workerStarted: [WorkerProcess];
  workerExited: [
    WorkerProcess & { exitCode: number | null; signal: string | null; stderrTail: string[] },
  ];
  headLost: [string];
}

interface Running {
  info: WorkerProcess;
  /** Start order on this node (the memory monitor kills the newest). */
  seq: number;
  /** Set when the memory monitor killed it. */
  memory?: MemoryKill;
  child: ChildProcess;
  out: WriteStream;
  err: WriteStream;
  tail: string[];
  partial: string;
}

const accepts = acceptedBy('node');

/** A node agent connected to a head. */
export class NodeAgent extends EventEmitter<NodeAgentEvents> {
  nodeId = '';
  readonly sessionDir: string;
  readonly resources: ResourceMap;
  private conn!: Connection;
  private readonly running = new Map<string, Running>();
  private closing = false;
  private starting = 0;
  /** Booted, unassigned worker processes. */
  private warm: ChildProcess[] = [];
  private startQueue: StartWorker[] = [];
  /** Exit reports that happened while the head was unreachable, sent after reconnecting. */
  private unsent: WorkerExited[] = [];
  /** Ships worker logs to the head (`shipLogs`). */
  private readonly logs: LogShipper | undefined;
  private statsTimer: NodeJS.Timeout | undefined;
  private readonly usage = new UsageSampler();
  private readonly memory: MemoryMonitor;
  private spawned = 0;
  /** Working-dir packages on this node. */
  private readonly packages: NodePackages;
  /** Workers (`actorId:incarnation`) waiting for their package. */
  private readonly fetching = new Set<string>();

  /** Use `startNodeAgent`. */
  constructor(private readonly opts: NodeAgentOptions) {
    super();
    this.sessionDir = opts.sessionDir ?? mkdtempSync(join(tmpdir(), 'rtjob-node-'));
    mkdirSync(join(this.sessionDir, 'logs'), { recursive: true });
    this.resources = {
      CPU: opts.numCpus ?? cpus().length,
      GPU: opts.numGpus ?? 0,
      memory: opts.memoryBytes ?? Math.floor(totalmem() * 0.7),
      ...opts.resources,
    };
    this.packages = new NodePackages(this.sessionDir, (hash) =>
      this.conn.request({ type: 'fetchPackage', hash }),
    );
    if (opts.shipLogs) this.logs = new LogShipper(() => this.conn, opts.shipLogsIntervalMs ?? 500);
    const threshold = opts.memoryUsageThreshold ?? memoryMonitorDefaults.memoryUsageThreshold;
    this.memory = new MemoryMonitor({
      threshold,
      intervalMs:
        threshold >= 1
          ? 0
          : (opts.memoryMonitorIntervalMs ?? memoryMonitorDefaults.memoryMonitorIntervalMs),
      read: opts.readMemory,
      onOverThreshold: (r) => this.killForMemory(r, threshold),
    });
  }

  /**
   * Memory is past the threshold: kills the most recently started worker (Ray's policy: the
   * newest has lost the least work), and resolves once it exited; false when none runs.
   */
  private killForMemory(reading: MemoryReading, threshold: number): Promise<boolean> {
    let newest: Running | undefined;
    for (const r of this.running.values())
      if (!r.memory && (!newest || r.seq > newest.seq)) newest = r;
    if (!newest) return Promise.resolve(false);
    const pid = newest.info.pid;
    const rssBytes = rssOf(pid);
    newest.memory = {
      nodeId: this.nodeId,
      usedBytes: reading.usedBytes,
      totalBytes: reading.totalBytes,
      threshold,
      pid,
      rssBytes,
    };
    log.warn(
      `memory in use ${reading.usedBytes} of ${reading.totalBytes} bytes (${reading.source}) is past ${threshold}: killing the newest worker, pid ${pid} (actor ${newest.info.actorId}, rss ${rssBytes ?? '?'} bytes)`,
    );
    const child = newest.child;
    const gone = new Promise<boolean>((resolve) =>
      child.exitCode !== null || child.signalCode !== null
        ? resolve(true)
        : child.once('close', () => resolve(true)),
    );
    child.kill('SIGKILL');
    return gone;
  }

  /** Idle booted workers in the pool (`warmWorkers`), waiting for an actor. */
  get idleWorkers(): number {
    return this.warm.length;
  }

  /** Workers running now. */
  get workers(): WorkerProcess[] {
    return [...this.running.values()].map((r) => r.info);
  }

  /** @internal */
  async start(): Promise<void> {
    this.conn = await this.register();
    this.watchHead();
    this.refillWarm();
    this.memory.start();
    this.logs?.start();
    const statsMs = this.opts.statsIntervalMs ?? 2000;
    if (statsMs > 0) {
      this.sendStats();
      this.statsTimer = setInterval(() => this.sendStats(), statsMs);
      this.statsTimer.unref();
    }
  }

  /** Samples this machine and its workers and tells the head; skipped while it is unreachable. */
  private sendStats(): void {
    if (this.conn.closed) return;
    this.conn.send({ type: 'nodeStats', ...this.usage.sample(this.workers) });
  }

  /** Boots idle workers up to `warmWorkers`, one at a time and only when nothing else starts. */
  private refillWarm(): void {
    const want = this.opts.warmWorkers ?? 1;
    if (this.closing || this.warm.length >= want || this.starting > 0 || this.startQueue.length > 0)
      return;
    const child = spawn(process.execPath, workerArgv(this.opts), {
      env: withLargePages({ ...process.env, ...this.opts.env, RTJOB_WARM: '1' }),
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    });
    this.warm.push(child);
    this.release(child);
    // Booted pool workers say so; the pool then grows by the next one, one boot at a time.
    const booted = (msg: { type?: string }) => {
      if (msg?.type !== 'warm') return;
      child.off('message', booted);
      this.refillWarm();
    };
    child.on('message', booted);
    const drop = () => {
      this.warm = this.warm.filter((c) => c !== child);
    };
    child.once('close', drop);
    child.once('error', drop);
    child.unref();
  }

  /** With `holdProcess: false`, a worker's handles must not keep this process alive. */
  private release(child: ChildProcess): void {
    if (this.opts.holdProcess !== false) return;
    child.unref();
    for (const s of [child.stdout, child.stderr]) (s as { unref?(): void } | null)?.unref?.();
    (child.channel as { unref?(): void } | undefined)?.unref?.();
  }

  /** An idle booted worker, if one is ready and `m` does not need a fresh process. */
  private takeWarm(m: StartWorker): ChildProcess | undefined {
    if (Object.keys(m.env).some((k) => k.startsWith('NODE_'))) return undefined; // needs a fresh boot
    for (;;) {
      const child = this.warm.shift();
      if (!child) return undefined;
      if (child.exitCode === null && child.signalCode === null && child.connected) {
        child.removeAllListeners('close');
        child.removeAllListeners('error');
        child.removeAllListeners('message');
        return child;
      }
    }
  }

  /** Connects and registers; a re-registration keeps the node id and lists running workers. */
  private async register(): Promise<Connection> {
    const conn = await connect(this.opts.headAddress, {
      token: this.opts.token,
      accepts,
      handler: (m) => this.handle(m),
      heartbeatTimeoutMs: this.opts.heartbeatTimeoutMs,
      holdProcess: this.opts.holdProcess ?? true,
    });
    try {
      const { nodeId } = await conn.request({
        type: 'registerNode',
        ...(this.nodeId ? { nodeId: this.nodeId } : {}),
        hostname: hostname(),
        host: this.opts.host ?? '127.0.0.1',
        pid: process.pid,
        resources: this.resources,
        sessionDir: this.sessionDir,
        ...(this.nodeId
          ? {
              workers: this.workers.map((w) => ({
                actorId: w.actorId,
                incarnation: w.incarnation,
                pid: w.pid,
              })),
            }
          : {}),
      });
      this.nodeId = nodeId;
    } catch (e) {
      conn.close('registration failed');
      throw e;
    }
    return conn;
  }

  private watchHead(): void {
    const conn = this.conn;
    conn.onClose((reason) => {
      if (this.closing || this.conn !== conn) return;
      const ms = this.opts.reconnectMs ?? 0;
      if (ms <= 0) {
        log.warn(`lost the head at ${this.opts.headAddress}: ${reason}; stopping workers`);
        this.emit('headLost', reason);
        void this.close();
        return;
      }
      log.warn(
        `lost the head at ${this.opts.headAddress}: ${reason}; workers keep running, reconnecting for up to ${ms} ms`,
      );
      void this.reconnect(Date.now() + ms, reason);
    });
  }

  private async reconnect(deadline: number, reason: string): Promise<void> {
    let delayMs = 100;
    while (!this.closing && Date.now() < deadline) {
      try {
        const conn = await this.register();
        if (this.closing) {
          conn.close('node agent shutting down');
          return;
        }
        this.conn = conn;
        this.watchHead();
        for (const m of this.unsent.splice(0)) conn.send(m);
        log.info(`re-registered node ${this.nodeId} with ${this.running.size} running workers`);
        return;
      } catch {
        await new Promise((r) => setTimeout(r, delayMs));
        delayMs = Math.min(delayMs * 2, 1000);
      }
    }
    if (this.closing) return;
    log.warn(`the head did not come back: ${reason}; stopping workers`);
    this.emit('headLost', reason);
    await this.close();
  }

  /** Kills every worker, waits for them to exit, and leaves the cluster. */
  async close(): Promise<void> {
    this.closing = true;
    this.logs?.stop();
    if (this.statsTimer) clearInterval(this.statsTimer);
    this.memory.stop();
    for (const c of this.warm.splice(0)) c.kill('SIGKILL');
    const exits = [...this.running.values()].map(
      (r) =>
        new Promise<void>((done) =>
          r.child.exitCode !== null || r.child.signalCode !== null
            ? done()
            : r.child.once('close', () => done()),
        ),
    );
    for (const r of this.running.values()) r.child.kill('SIGKILL');
    await Promise.all(exits);
    this.conn?.close('node agent shutting down');
  }

  private handle(m: Message): void {
    if (m.type === 'startWorker') {
      this.startQueue.push(m);
      this.pumpStarts();
    } else if (m.type === 'stopWorker') {
      const queued = this.startQueue.findIndex(
        (q) => q.actorId === m.actorId && q.incarnation === m.incarnation,
      );
      if (queued >= 0) {
        this.startQueue.splice(queued, 1);
        this.conn.send({
          type: 'workerExited',
          actorId: m.actorId,
          incarnation: m.incarnation,
          exitCode: null,
          signal: 'SIGKILL',
          stderrTail: [],
        });
        return;
      }
      if (this.fetching.delete(`${m.actorId}:${m.incarnation}`)) return; // reported once fetched
      const r = this.running.get(m.actorId);
      if (r && r.info.incarnation === m.incarnation) r.child.kill('SIGKILL');
    }
  }

  /** Starts queued workers while fewer than `maxStartingWorkers` are still starting. */
  private pumpStarts(): void {
    const max = this.opts.maxStartingWorkers ?? Math.max(2, cpus().length);
    while (this.starting < max && this.startQueue.length > 0 && !this.closing) {
      this.starting++;
      this.startWorker(this.startQueue.shift()!);
    }
  }

  /**
   * Starts a worker; one of a job with an uploaded working dir first gets that package onto this
   * node (fetched from the head once per node, kept by content hash) and runs in this copy.
   */
  private startWorker(m: StartWorker): void {
    if (this.closing) return;
    const hash = m.env.RTJOB_PACKAGE;
    if (
      !hash ||
      !isPackageHash(hash) ||
      m.env.RTJOB_WORKING_DIR === packagesDir(this.sessionDir, hash)
    ) {
      this.spawnWorker(m);
      return;
    }
    const key = `${m.actorId}:${m.incarnation}`;
    this.fetching.add(key);
    this.packages.local(hash, m.env.RTJOB_SUBMITTER_MODULES).then(
      (dir) => {
        if (!this.fetching.delete(key)) return this.startFailed(m, null, 'SIGKILL', []); // stopped meanwhile
        this.spawnWorker({ ...m, env: { ...m.env, RTJOB_WORKING_DIR: dir } });
      },
      (e: Error) => {
        this.fetching.delete(key);
        const why = isRtjobError(e, 'DEPENDENCY_INSTALL')
          ? e.message
          : `cannot get the job's working dir (package ${hash.slice(0, 12)}) from the head: ${e.message}`;
        log.error(`worker for ${m.actorId}: ${why}`);
        this.startFailed(m, 1, null, [why]);
      },
    );
  }

  /** A worker that never started: the head hears of it as of any exit. */
  private startFailed(
    m: StartWorker,
    exitCode: number | null,
    signal: string | null,
    stderrTail: string[],
  ): void {
    this.starting--;
    this.pumpStarts();
    const report: WorkerExited = {
      type: 'workerExited',
      actorId: m.actorId,
      incarnation: m.incarnation,
      exitCode,
      signal,
      stderrTail,
    };
    this.report(report);
  }

  /** Tells the head a worker ended; kept for after the reconnect while the head is away. */
  private report(m: WorkerExited): void {
    if (this.conn.closed && !this.closing && (this.opts.reconnectMs ?? 0) > 0) this.unsent.push(m);
    else this.conn.send(m);
  }

  private spawnWorker(m: StartWorker): void {
    if (this.closing) return;
    const base = join(this.sessionDir, 'logs', `worker-${m.actorId}-${m.incarnation}`);
    const logFiles = { stdout: `${base}.out`, stderr: `${base}.err` };
    const env = workerEnv(
      this.opts,
      m,
      this.nodeId,
      this.sessionDir,
      (this.resources.GPU ?? 0) > 0,
    );
    const warm = this.takeWarm(m);
    const child =
      warm ??
      spawn(process.execPath, workerArgv(this.opts), {
        env: withLargePages(env),
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      });
    this.release(child);
    if (warm) {
      if (this.opts.holdProcess !== false) warm.ref();
      warm.send(assignMessage(env));
    }
    const out = createWriteStream(logFiles.stdout, { flags: 'a' });
    const err = createWriteStream(logFiles.stderr, { flags: 'a' });
    const info: WorkerProcess = {
      actorId: m.actorId,
      incarnation: m.incarnation,
      pid: child.pid ?? -1,
      logFiles,
    };
    const r: Running = { info, seq: ++this.spawned, child, out, err, tail: [], partial: '' };
    let startingCounted = true;
    const started = () => {
      if (!startingCounted) return;
      startingCounted = false;
      this.starting--;
      this.pumpStarts();
    };
    // The worker says `ready` over IPC once it serves calls (or it exits trying).
    child.on('message', (msg: { type?: string }) => {
      if (msg?.type !== 'ready') return;
      started();
      this.refillWarm();
    });
    const keep = this.opts.stderrTailLines ?? 30;
    child.stdout!.pipe(out);
    child.stderr!.on('data', (d: Buffer) => {
      err.write(d);
      const lines = (r.partial + d.toString()).split('\n');
      r.partial = lines.pop() ?? '';
      r.tail.push(...lines);
      if (r.tail.length > keep) r.tail.splice(0, r.tail.length - keep);
    });
    child.on('error', (e) => log.error(`worker for ${m.actorId} failed to start: ${e.message}`));
    this.logs?.add(m.actorId, m.incarnation, logFiles);
    child.on('close', (code, signal) => {
      // Shared-memory and spilled objects of a worker that could not clean up (killed) go now.
      if (child.pid !== undefined) removeObjectFilesOf(child.pid);
      // Ship the last bytes once both log files are flushed.
      this.logs?.finish(logFiles, out, err);
      started();
      setImmediate(() => this.refillWarm());
      if (r.partial) r.tail.push(r.partial);
      if (this.running.get(m.actorId) === r) this.running.delete(m.actorId);
      err.end();
      const stderrTail = r.tail.slice(-keep);
      this.emit('workerExited', { ...info, exitCode: code, signal, stderrTail });
      const report: WorkerExited = {
        type: 'workerExited',
        actorId: m.actorId,
        incarnation: m.incarnation,
        exitCode: code,
        signal,
        stderrTail,
        ...(r.memory ? { memory: r.memory } : {}),
      };
      this.report(report);
    });
    this.running.set(m.actorId, r);
    this.emit('workerStarted', info);
  }
}

/**
 * Starts a node agent and registers it with the head.
 *
 * @example
 * const node = await startNodeAgent({ headAddress: head.address, token: head.token, numGpus: 2 });
 */
export async function startNodeAgent(options: NodeAgentOptions): Promise<NodeAgent> {
  const agent = new NodeAgent(options);
  await agent.start();
  return agent;
}
