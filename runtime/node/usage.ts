/**
 * What a machine and its processes use right now: CPU and memory of the machine, and CPU and
 * resident memory of chosen processes (a node agent's workers and itself; the head itself and
 * each job driver's process group). CPU is a rate, so every figure is the difference between two
 * samples; a process seen for the first time has no CPU figure until the next one. Figures of
 * other processes come from `/proc` (Linux); elsewhere they are `null` and only the machine's
 * and the sampling process's own are known.
 *
 * @module
 */
import { readdirSync, readFileSync } from 'node:fs';
import { cpus, freemem, totalmem } from 'node:os';

import type { NodeStats, ProcessUsage } from '../protocol.ts';

/**
 * Clock ticks per second in `/proc/<pid>/stat`: the kernel's USER_HZ, which its ABI fixes at
 * 100 on every architecture Node runs on.
 */
const ticksPerSecond = 100;

/** What `/proc/<pid>/stat` says about a process: its process group and its CPU time. */
export interface ProcStat {
  readonly pgrp: number;
  /** CPU time, user + system, in clock ticks. */
  readonly ticks: number;
}

/**
 * The process group and CPU time in the text of `/proc/<pid>/stat`, or `undefined` when it is not
 * one. The command name (field 2) may hold spaces and parentheses, so fields are counted from the
 * last `)`.
 */
export function parseStat(text: string): ProcStat | undefined {
  const close = text.lastIndexOf(')');
  if (close < 0) return undefined;
  // After ")": state is field 3, so pgrp (field 5) is at 2, utime (14) and stime (15) at 11, 12.
  const fields = text
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  const pgrp = Number(fields[2]);
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  return Number.isInteger(pgrp) && Number.isFinite(utime) && Number.isFinite(stime)
    ? { pgrp, ticks: utime + stime }
    : undefined;
}

/** CPU time (user + system, in clock ticks) in the text of `/proc/<pid>/stat`. */
export function cpuTicksOfStat(text: string): number | undefined {
  return parseStat(text)?.ticks;
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

/** Processes of the machine by pid, from one read of `/proc` (empty where there is none). */
function allProcesses(): Map<number, ProcStat> {
  const out = new Map<number, ProcStat>();
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return out; // not Linux
  }
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    const st = parseStat(readProc(pid, 'stat') ?? '');
    if (st) out.set(pid, st);
  }
  return out;
}

/** What one {@link ProcessSampler.sample} measured. */
export interface ProcessSample {
  /** This process, from Node's own counters (so known off Linux too). */
  readonly self: ProcessUsage;
  /** Each pid asked for, in order. */
  readonly processes: ProcessUsage[];
  /**
   * Each process group asked for (by its leader's pid), in order: CPU and resident memory summed
   * over its members (shared pages count once per member), with how many there are.
   */
  readonly groups: (ProcessUsage & { readonly members: number })[];
}

/**
 * CPU and resident memory of chosen processes, and of this one: the one implementation of
 * `/proc` sampling, used by node agents (their workers) and the head (itself and job drivers).
 * CPU is the rate since the previous `sample()`, so a process (or group) seen for the first time
 * has `cpuPercent: null` until the next one.
 */
export class ProcessSampler {
  private lastAtMs = Date.now();
  private selfCpu = process.cpuUsage();
  /** CPU ticks of each pid sampled last time (asked for, or a member of a group asked for). */
  private ticks = new Map<number, number>();
  /** Groups sampled last time. */
  private groupsSeen = new Set<number>();

  /** Rates since the previous call; `groups` costs one read of every process's `stat`. */
  sample(pids: readonly number[], groups: readonly number[] = []): ProcessSample {
    const now = Date.now();
    const wallMs = now - this.lastAtMs;
    const selfCpu = process.cpuUsage();
    const selfMs = (selfCpu.user - this.selfCpu.user + selfCpu.system - this.selfCpu.system) / 1000;
    const ticks = new Map<number, number>();
    const cpuOf = (pid: number, t: number, bornSinceLast: boolean): number | null => {
      ticks.set(pid, t);
      const before = this.ticks.get(pid) ?? (bornSinceLast ? 0 : undefined);
      return before === undefined ? null : ((t - before) * 1000) / ticksPerSecond;
    };
    const rssOf = (pid: number): number | null => {
      const status = readProc(pid, 'status');
      return status === undefined ? null : (rssOfStatus(status) ?? null);
    };
    const processes = pids.map((pid): ProcessUsage => {
      const t = cpuTicksOfStat(readProc(pid, 'stat') ?? '');
      const cpuMs = t === undefined ? null : cpuOf(pid, t, false);
      return {
        pid,
        cpuPercent: cpuMs === null ? null : percentOfCore(cpuMs, wallMs),
        rssBytes: rssOf(pid),
      };
    });
    const byGroup = new Map<number, [number, ProcStat][]>(groups.map((g) => [g, []]));
    if (groups.length > 0)
      for (const [pid, st] of allProcesses()) byGroup.get(st.pgrp)?.push([pid, st]);
    const out = groups.map((leader) => {
      const members = byGroup.get(leader)!;
      // A member new to a group seen last time started since then: all its CPU time is new.
      const known = this.groupsSeen.has(leader);
      let cpuMs: number | null = known ? 0 : null;
      let rss: number | null = null;
      for (const [pid, st] of members) {
        const ms = cpuOf(pid, st.ticks, known);
        if (cpuMs !== null && ms !== null) cpuMs += ms;
        const r = rssOf(pid);
        if (r !== null) rss = (rss ?? 0) + r;
      }
      return {
        pid: leader,
        cpuPercent: cpuMs === null || members.length === 0 ? null : percentOfCore(cpuMs, wallMs),
        rssBytes: rss,
        members: members.length,
      };
    });
    this.groupsSeen = new Set(groups.filter((g) => byGroup.get(g)!.length > 0));
    this.ticks = ticks;
    this.selfCpu = selfCpu;
    this.lastAtMs = now;
    return {
      self: {
        pid: process.pid,
        cpuPercent: percentOfCore(selfMs, wallMs),
        rssBytes: process.memoryUsage.rss(),
      },
      processes,
      groups: out,
    };
  }
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
  private readonly processes = new ProcessSampler();

  /** The node's usage now, as the `nodeStats` message carries it. */
  sample(workers: readonly SampledWorker[]): Omit<NodeStats, 'type'> {
    const machine = machineCpu();
    const dTotal = machine.totalMs - this.machine.totalMs;
    const { self, processes } = this.processes.sample(workers.map((w) => w.pid));
    const stats = {
      cpuPercent:
        dTotal > 0
          ? Math.round((1000 * (machine.busyMs - this.machine.busyMs)) / dTotal) / 10
          : null,
      cpuCount: cpus().length,
      memoryUsedBytes: totalmem() - freemem(),
      memoryTotalBytes: totalmem(),
      agent: self,
      workers: workers.map((w, i) => ({
        ...processes[i]!,
        actorId: w.actorId,
        incarnation: w.incarnation,
      })),
    };
    this.machine = machine;
    return stats;
  }
}
