/**
 * The node agent's memory monitor (Ray's idea): every `intervalMs` it reads the memory in use —
 * of the agent's cgroup when that has a limit (cgroup v2 `memory.max`/`memory.current`, or v1
 * `memory.limit_in_bytes`/`memory.usage_in_bytes`), else of the machine (`MemTotal −
 * MemAvailable`) — and, once the share in use passes `threshold`, asks the agent to kill a worker
 * (the most recently started one) before the kernel's OOM killer picks a process itself. One kill
 * at a time: the next reading that counts is taken after that worker exited.
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { freemem, totalmem } from 'node:os';
import { rssOfStatus } from './usage.ts';

/** Memory in use where the monitor looks. */
export interface MemoryReading {
  readonly usedBytes: number;
  readonly totalBytes: number;
  /** `cgroup` when a cgroup limit bounds this process, else `machine`. */
  readonly source: 'cgroup' | 'machine';
}

/** Options of the monitor (resolved from `NodeAgentOptions`). */
export interface MemoryMonitorOptions {
  /** Share of memory in use (0–1] past which a worker is killed. */
  readonly threshold: number;
  readonly intervalMs: number;
  /** Reads memory in use. @default {@link readMemory} */
  readonly read?: () => MemoryReading;
  /**
   * Called past the threshold; kills a worker and resolves once it exited (or at once, with
   * false, when there was none to kill).
   */
  readonly onOverThreshold: (reading: MemoryReading) => Promise<boolean>;
}

/** Defaults of the memory monitor's options on `NodeAgentOptions`. */
export const memoryMonitorDefaults = {
  /** Ray's default `memory_usage_threshold`. */
  memoryUsageThreshold: 0.95,
  memoryMonitorIntervalMs: 250,
} as const;

/** Watches memory and triggers kills past the threshold. */
export class MemoryMonitor {
  private timer: NodeJS.Timeout | undefined;
  private killing = false;
  private readonly read: () => MemoryReading;

  constructor(private readonly o: MemoryMonitorOptions) {
    this.read = o.read ?? readMemory;
  }

  start(): void {
    if (this.o.intervalMs <= 0 || this.timer) return;
    this.timer = setInterval(() => this.check(), this.o.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One reading; kills when past the threshold and no kill is under way. */
  check(): void {
    if (this.killing) return;
    const r = this.read();
    if (r.totalBytes <= 0 || r.usedBytes / r.totalBytes < this.o.threshold) return;
    this.killing = true;
    void this.o.onOverThreshold(r).finally(() => (this.killing = false));
  }
}

/** Memory in use by this process's cgroup when it has a limit, else by the machine. */
export function readMemory(): MemoryReading {
  return cgroupMemory() ?? machineMemory();
}

function machineMemory(): MemoryReading {
  const info = readText('/proc/meminfo');
  const kib = (name: string) => {
    const m = info && new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(info);
    return m ? Number(m[1]) * 1024 : undefined;
  };
  const total = kib('MemTotal');
  const available = kib('MemAvailable');
  if (total !== undefined && available !== undefined)
    return { usedBytes: total - available, totalBytes: total, source: 'machine' };
  return { usedBytes: totalmem() - freemem(), totalBytes: totalmem(), source: 'machine' };
}

/** The limit and usage of this process's memory cgroup, when it has a limit below the machine's. */
function cgroupMemory(): MemoryReading | undefined {
  const lines = (readText('/proc/self/cgroup') ?? '').split('\n');
  const machineTotal = totalmem();
  // cgroup v2: "0::/path"
  const v2 = lines.find((l) => l.startsWith('0::'));
  if (v2 !== undefined) {
    const dir = `/sys/fs/cgroup${v2.slice(3)}`.replace(/\/$/, '');
    const r = limitAndUsage(`${dir}/memory.max`, `${dir}/memory.current`, machineTotal);
    if (r) return r;
  }
  // cgroup v1: "N:memory:/path", mounted at /sys/fs/cgroup/memory (often the path's own root).
  const v1 = lines.find((l) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(l));
  if (v1 !== undefined) {
    const path = v1.slice(v1.indexOf(':', v1.indexOf(':') + 1) + 1);
    for (const dir of [`/sys/fs/cgroup/memory${path}`, '/sys/fs/cgroup/memory']) {
      const r = limitAndUsage(
        `${dir}/memory.limit_in_bytes`,
        `${dir}/memory.usage_in_bytes`,
        machineTotal,
      );
      if (r) return r;
    }
  }
  return undefined;
}

function limitAndUsage(
  limitFile: string,
  usageFile: string,
  machineTotal: number,
): MemoryReading | undefined {
  const limit = Number(readText(limitFile)?.trim());
  const used = Number(readText(usageFile)?.trim());
  // "max", or v1's huge number: no limit of its own.
  if (!Number.isFinite(limit) || !Number.isFinite(used) || limit <= 0 || limit >= machineTotal)
    return undefined;
  return { usedBytes: used, totalBytes: limit, source: 'cgroup' };
}

/** A process's resident memory, or null when it cannot be read (gone, or not Linux). */
export function rssOf(pid: number): number | null {
  const status = readText(`/proc/${pid}/status`);
  return status === undefined ? null : (rssOfStatus(status) ?? null);
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}
