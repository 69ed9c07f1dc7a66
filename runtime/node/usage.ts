/**
 * What a node's machine and its processes use right now: CPU and memory of the machine, and CPU
 * and resident memory of each worker process and of the node agent. CPU is a rate, so every
 * figure is the difference between two samples; a process seen for the first time has no CPU
 * figure until the next one. Worker figures come from `/proc` (Linux); elsewhere they are
 * `null` and only the machine's and the agent's are known.
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import { cpus, freemem, totalmem } from 'node:os';

import type { NodeStats } from '../protocol.ts';

/**
 * Clock ticks per second in `/proc/<pid>/stat`: the kernel's USER_HZ, which its ABI fixes at
 * 100 on every architecture Node runs on.
 */
const ticksPerSecond = 100;

/**
 * CPU time (user + system, in clock ticks) in the text of `/proc/<pid>/stat`, or `undefined`
 * when it is not one. The command name (field 2) may hold spaces and parentheses, so fields are
 * counted from the last `)`.
 */
export function cpuTicksOfStat(text: string): number | undefined {
  const close = text.lastIndexOf(')');
  if (close < 0) return undefined;
  // After ")": state is field 3, so utime (field 14) and stime (field 15) are at 11 and 12.
  const fields = text
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return Number.isFinite(utime) && Number.isFinite(stime) ? utime + stime : undefined;
}

/** Resident memory in bytes in the text of `/proc/<pid>/status` (`VmRSS:`), if it has it. */
export function rssOfStatus(text: string): number | undefined {
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(text);
  return m ? Number(m[1]) * 1024 : undefined;
}

function readProc(pid: number, file: string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return undefined; // gone, or not Linux
  }
}

/** Busy and total CPU time of the machine, over all cores, in ms. */
function machineCpu(): { busyMs: number; totalMs: number } {
  let busyMs = 0;
  let totalMs = 0;
  for (const c of cpus()) {
    const t = c.times;
    const all = t.user + t.nice + t.sys + t.irq + t.idle;
    totalMs += all;
    busyMs += all - t.idle;
  }
  return { busyMs, totalMs };
}

/** CPU percent (100 = one core) from a difference in CPU time over a difference in wall time. */
function percentOfCore(cpuMs: number, wallMs: number): number | null {
  if (wallMs <= 0) return null;
  return Math.max(0, Math.round((1000 * cpuMs) / wallMs) / 10);
}

/** A process to sample: a worker of the node, with the actor it hosts. */
export interface SampledWorker {
  readonly actorId: string;
  readonly incarnation: number;
  readonly pid: number;
}

/** Samples a node's usage; each `sample()` reports the rates since the previous one. */
export class UsageSampler {
  private machine = machineCpu();
  private agentCpu = process.cpuUsage();
  private lastAtMs = Date.now();
  /** CPU ticks of each worker pid at the previous sample. */
  private ticks = new Map<number, number>();

  /** The node's usage now, as the `nodeStats` message carries it. */
  sample(workers: readonly SampledWorker[]): Omit<NodeStats, 'type'> {
    const now = Date.now();
    const wallMs = now - this.lastAtMs;
    const machine = machineCpu();
    const dTotal = machine.totalMs - this.machine.totalMs;
    const agentCpu = process.cpuUsage();
    const agentCpuMs =
      (agentCpu.user - this.agentCpu.user + agentCpu.system - this.agentCpu.system) / 1000;
    const ticks = new Map<number, number>();
    const out = workers.map((w) => {
      const t = cpuTicksOfStat(readProc(w.pid, 'stat') ?? '');
      const status = readProc(w.pid, 'status');
      const before = this.ticks.get(w.pid);
      if (t !== undefined) ticks.set(w.pid, t);
      return {
        actorId: w.actorId,
        incarnation: w.incarnation,
        pid: w.pid,
        cpuPercent:
          t !== undefined && before !== undefined
            ? percentOfCore(((t - before) * 1000) / ticksPerSecond, wallMs)
            : null,
        rssBytes: status === undefined ? null : (rssOfStatus(status) ?? null),
      };
    });
    const stats = {
      cpuPercent:
        dTotal > 0
          ? Math.round((1000 * (machine.busyMs - this.machine.busyMs)) / dTotal) / 10
          : null,
      cpuCount: cpus().length,
      memoryUsedBytes: totalmem() - freemem(),
      memoryTotalBytes: totalmem(),
      agent: {
        pid: process.pid,
        cpuPercent: percentOfCore(agentCpuMs, wallMs),
        rssBytes: process.memoryUsage.rss(),
      },
      workers: out,
    };
    this.machine = machine;
    this.agentCpu = agentCpu;
    this.lastAtMs = now;
    this.ticks = ticks;
    return stats;
  }
}
