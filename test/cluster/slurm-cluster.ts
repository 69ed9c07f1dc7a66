/**
 * A two-host Slurm cluster on this machine, for tests: munged, slurmctld and a slurmd here (node
 * `n1`), and a second slurmd (`n2`) in a network namespace of its own, reached over a veth pair
 * at its own address, as another machine would be. Debian's slurm-wlm 22.05 and munge, as root
 * (slurmd starts job steps as their user; the namespace needs CAP_NET_ADMIN).
 *
 * Every process it starts, and every process those start (job steps, rtjob daemons, workers),
 * carries `TEST_SLURM_CLUSTER=<its dir>` in its environment, so {@link SlurmCluster.close} finds and
 * ends them all, also after a failed test, and never a process it did not start.
 *
 * @module
 */
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';

import { netns, type Netns } from '../chaos/harness.ts';
import { until } from '../cli/helpers.ts';

/** One slurmd host of the cluster. */
export interface SlurmHost {
  /** Slurm's NodeName. */
  name: string;
  /** Its NodeAddr (where slurmctld, srun and rtjob reach it). */
  ip: string;
}

/** What a command printed and how it ended. */
export interface CommandResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

const marker = 'TEST_SLURM_CLUSTER';

/** A free TCP port on `host` (the OS picks one; the daemon takes it a moment later). */
export function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, host, () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/** The environment of a process, or undefined when it is gone or not ours to read. */
function environOf(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/environ`, 'utf8');
  } catch {
    return undefined;
  }
}

/** The running processes of this machine, by pid. */
export function processIds(): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number);
}

/** Slurm, munge and the namespace, all started by {@link SlurmCluster.start}. */
export class SlurmCluster {
  /** Environment for Slurm's commands (sbatch, squeue, …) and for the jobs they submit. */
  readonly env: NodeJS.ProcessEnv;
  private readonly daemons: { name: string; child: ChildProcess; log: string }[] = [];

  private constructor(
    /** A private scratch dir (0700): config, state, logs. */
    readonly dir: string,
    readonly net: Netns,
    readonly hosts: [SlurmHost, SlurmHost],
  ) {
    this.env = { ...process.env, SLURM_CONF: join(dir, 'slurm.conf'), [marker]: dir };
  }

  /**
   * Starts munged, slurmctld and two slurmd hosts, and waits (bounded) until both are idle.
   * Throws one line naming what is missing when this machine cannot run them.
   */
  static async start(): Promise<SlurmCluster> {
    // The daemons and `ip` live in /usr/sbin, which a CI's PATH (and so the job's) may lack.
    const path = (process.env.PATH ?? '').split(':');
    process.env.PATH = [...path, ...['/usr/sbin', '/sbin'].filter((d) => !path.includes(d))].join(
      ':',
    );
    const missing = ['munged', 'slurmctld', 'slurmd', 'sbatch', 'sbcast', 'nsenter', 'ip'].filter(
      (b) => {
        try {
          execFileSync('which', [b], { stdio: 'ignore' });
          return false;
        } catch {
          return true;
        }
      },
    );
    if (process.getuid?.() !== 0 || missing.length)
      throw new Error(
        `the Slurm test needs root and Debian's slurm-wlm and munge (apt-get install slurm-wlm munge)${missing.length ? `; missing: ${missing.join(', ')}` : '; not root'}`,
      );
    const dir = mkdtempSync(join(tmpdir(), 'rtjob-slurm-'));
    const net = netns();
    const c = new SlurmCluster(dir, net, [
      { name: 'n1', ip: net.hostIp },
      { name: 'n2', ip: net.nsIp },
    ]);
    try {
      await c.boot();
    } catch (err) {
      await c.close();
      throw err;
    }
    return c;
  }

  private async boot(): Promise<void> {
    const d = this.dir;
    for (const sub of ['munge', 'state', 'log', 'spool-n1', 'spool-n2', 'tmp'])
      mkdirSync(join(d, sub), { recursive: true, mode: 0o700 });
    const socket = join(d, 'munge', 'socket');
    writeFileSync(join(d, 'munge', 'key'), randomBytes(1024), { mode: 0o400 });
    this.daemon('munged', [
      'munged',
      '--foreground',
      '--force',
      `--socket=${socket}`,
      `--key-file=${join(d, 'munge', 'key')}`,
      `--log-file=${join(d, 'log', 'munged.log')}`,
      `--pid-file=${join(d, 'munge', 'pid')}`,
      `--seed-file=${join(d, 'munge', 'seed')}`,
    ]);
    await this.untilUp('munged', 10_000, async () =>
      (await this.run('munge', ['-n', `--socket=${socket}`])).code === 0 ? true : undefined,
    );

    const [n1, n2] = this.hosts;
    const ctlPort = await freePort(n1.ip);
    const slurmdPort = await freePort(n1.ip);
    const conf = [
      'ClusterName=rtjobtest',
      `SlurmctldHost=${hostname()}(${n1.ip})`,
      `SlurmctldPort=${ctlPort}`,
      `SlurmdPort=${slurmdPort}`,
      'SlurmUser=root',
      'SlurmdUser=root',
      'AuthType=auth/munge',
      `AuthInfo=socket=${socket}`,
      'CredType=cred/munge',
      `StateSaveLocation=${join(d, 'state')}`,
      `SlurmdSpoolDir=${join(d, 'spool-%n')}`,
      `SlurmctldPidFile=${join(d, 'slurmctld.pid')}`,
      `SlurmdPidFile=${join(d, 'slurmd-%n.pid')}`,
      `SlurmctldLogFile=${join(d, 'log', 'slurmctld.log')}`,
      `SlurmdLogFile=${join(d, 'log', 'slurmd-%n.log')}`,
      // No cgroups: the namespace's host shares this machine's, and CI containers may lack them.
      'ProctrackType=proctrack/linuxproc',
      'TaskPlugin=task/none',
      'JobAcctGatherType=jobacct_gather/none',
      'AccountingStorageType=accounting_storage/none',
      'SwitchType=switch/none',
      'MpiDefault=none',
      'MailProg=/bin/true',
      'SelectType=select/cons_tres',
      'SelectTypeParameters=CR_Core',
      'ReturnToService=2',
      'KillWait=30',
      ...this.hosts.map(
        (h) => `NodeName=${h.name} NodeAddr=${h.ip} CPUs=2 RealMemory=2000 State=UNKNOWN`,
      ),
      `PartitionName=rtjob Nodes=${this.hosts.map((h) => h.name).join(',')} Default=YES MaxTime=10 State=UP`,
    ];
    writeFileSync(join(d, 'slurm.conf'), conf.join('\n') + '\n');
    const cf = ['-f', join(d, 'slurm.conf')];
    this.daemon('slurmctld', ['slurmctld', '-D', ...cf]);
    this.daemon('slurmd n1', ['slurmd', '-D', '-N', n1.name, ...cf]);
    // nsenter, not `ip netns exec`: that one mounts a fresh /sys without the cgroup tree, which
    // slurmd refuses to start without.
    this.daemon('slurmd n2', [
      'nsenter',
      `--net=/run/netns/${this.net.name}`,
      'slurmd',
      '-D',
      '-N',
      n2.name,
      ...cf,
    ]);
    await this.untilUp('both slurmd hosts idle', 60_000, async () => {
      const r = await this.run('sinfo', ['-h', '-N', '-o', '%N %t']);
      const idle = r.stdout.split('\n').filter((l) => / idle$/.test(l.trim()));
      return idle.length === this.hosts.length ? true : undefined;
    });
  }

  /** Starts a daemon in the foreground, its output in `log/<name>.out`. */
  private daemon(name: string, argv: string[]): void {
    const log = join(this.dir, 'log', `${name.replace(/\W+/g, '-')}.out`);
    const out = openSync(log, 'a');
    const child = spawn(argv[0]!, argv.slice(1), {
      env: this.env,
      stdio: ['ignore', out, out],
    });
    closeSync(out);
    this.daemons.push({ name, child, log });
  }

  /** Polls `check` with a deadline; a daemon that exited meanwhile fails it with its log. */
  private untilUp<T>(
    what: string,
    timeoutMs: number,
    check: () => Promise<T | undefined>,
  ): Promise<T> {
    return until(
      what,
      async () => {
        const dead = this.daemons.find((x) => x.child.exitCode !== null || x.child.signalCode);
        if (dead)
          throw new Error(
            `${dead.name} exited (${dead.child.exitCode ?? dead.child.signalCode}):\n${readFileSync(dead.log, 'utf8').slice(-2000)}`,
          );
        return check();
      },
      timeoutMs,
    );
  }

  /** Runs a Slurm (or any) command with this cluster's environment, bounded by `timeoutMs`. */
  run(
    cmd: string,
    args: string[],
    opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number; cwd?: string } = {},
  ): Promise<CommandResult> {
    return new Promise((resolve) => {
      execFile(
        cmd,
        args,
        {
          env: { ...this.env, ...opts.env },
          cwd: opts.cwd,
          timeout: opts.timeoutMs ?? 30_000,
          killSignal: 'SIGKILL',
          maxBuffer: 16 << 20,
        },
        (err, stdout, stderr) => {
          const code = err ? (typeof err.code === 'number' ? err.code : null) : 0;
          resolve({ code, stdout, stderr });
        },
      );
    });
  }

  /** The pids of every live process this cluster started, directly or not (this one excluded). */
  ownProcesses(): number[] {
    const tag = `${marker}=${this.dir}\0`;
    return processIds().filter((p) => p !== process.pid && environOf(p)?.includes(tag));
  }

  /** A daemon's log and output, for a failure message. */
  logs(): string {
    const dir = join(this.dir, 'log');
    return readdirSync(dir)
      .filter((f) => statSync(join(dir, f)).isFile())
      .map((f) => `--- ${f}\n${readFileSync(join(dir, f), 'utf8').slice(-1500)}`)
      .join('\n');
  }

  /**
   * Cancels the jobs, stops the daemons, ends whatever they left (found by the environment
   * marker), and removes the namespace and the scratch dir.
   */
  async close(): Promise<void> {
    if (this.daemons.some((x) => x.name === 'slurmctld' && x.child.exitCode === null))
      await this.run('scancel', ['--full', '--user=root'], { timeoutMs: 10_000 });
    for (const { child } of this.daemons) if (child.exitCode === null) child.kill('SIGTERM');
    await until(
      'Slurm daemons to exit',
      () =>
        this.daemons.every((x) => x.child.exitCode !== null || x.child.signalCode) ? 1 : undefined,
      15_000,
    ).catch(() => {
      for (const { child } of this.daemons) child.kill('SIGKILL');
    });
    for (const pid of this.ownProcesses()) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
    this.net.remove();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
