/**
 * The job supervisor: accepts job submissions, keeps them PENDING until their entrypoint
 * resources fit, runs each driver as a process group with its output in a log file, and records
 * how it ended. Drivers write to files, never to pipes held by the head, and a tiny `sh` wrapper
 * records their exit code on disk — so a head that is killed and restarted re-adopts running
 * drivers and still learns how they ended.
 *
 * @module
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

import { tailLines } from '../logs/log-file.ts';
import { resolveEntrypoint, tsxImport } from './entrypoint.ts';
import { OpsError } from './errors.ts';
import { type JobInfo, type JobStatus, type OpsStore, terminalJobStatuses } from './ops-store.ts';
import { needsDependencies, withDependencies } from '../../runtime/packages/package-deps.ts';
import { isPackageHash } from '../../runtime/packages/working-dir.ts';
import { ownModuleNodeFlags } from '../../runtime/own-files.ts';
import { pidAlive } from '../../runtime/pid.ts';
import { largePageMallocEnv } from '../../runtime/client/shm.ts';
import { stopGraceMs } from './stop-grace.ts';

/** A job as submitted over the API or by the CLI. */
export interface JobSubmitRequest {
  /** argv (`['train_ppo', '--async-train']`), or one string run by `/bin/sh -c`. */
  entrypoint: string[] | string;
  /** Must be unused; generated when absent. */
  jobId?: string;
  /** `pkg://<sha256>` of an uploaded working dir; the driver runs inside it. */
  workingDir?: string;
  /** A directory on the head's machine to run in (local clusters); ignored with `workingDir`. */
  cwd?: string;
  /** Env for the driver and every worker of the job; shown on the job page. */
  env?: Record<string, string>;
  /**
   * More env for the driver and every worker that is not shown (the caller's other variables);
   * `env` wins where both set a name.
   */
  inheritedEnv?: Record<string, string>;
  metadata?: Record<string, string>;
  /** CPUs the driver itself needs; the job stays PENDING until they are free. @default 0 */
  entrypointNumCpus?: number;
  /** GPUs the driver itself needs. @default 0 */
  entrypointNumGpus?: number;
}

/** Options of {@link JobSupervisor}. */
export interface JobSupervisorOptions {
  store: OpsStore;
  sessionDir: string;
  /** Env every driver gets so it can reach the cluster (address, token, HTTP URL). */
  clusterEnv: () => Record<string, string>;
  /** Resources entrypoints may use in total. @default the machine's CPUs, no GPUs */
  capacity?: () => { cpus: number; gpus: number };
  /** Kills a job's non-detached actors once its driver is gone. */
  killJobActors?: (jobId: string) => Promise<void> | void;
  /** Time between SIGTERM and SIGKILL when stopping a driver. @default 3000 */
  stopGraceMs?: number;
  /** Lines of driver output put into a failed job's message. @default 20 */
  messageTailLines?: number;
  /**
   * Entrypoint names that run a script (`train_ppo` → its driver file); the CLI passes the
   * package's drivers. @default none
   */
  builtins?: Readonly<Record<string, string>>;
}

const jobIdPattern = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

function newJobId(): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, '0');
  const stamp = `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}_${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
  return `job_${stamp}_${randomBytes(3).toString('hex')}`;
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // already gone
    }
  }
}

/** `sh -c` script around a driver: `$0` is the exit file, `$@` the driver's argv. */
const wrapperScript =
  'trap : TERM INT HUP; "$@" & pid=$!; ' +
  'while :; do wait $pid; code=$?; kill -0 $pid 2>/dev/null || break; done; ' +
  'echo $code > "$0"; exit $code';

/** What the supervisor tracks for a driver it runs or re-adopted. */
interface Running {
  pid: number;
  exitFile: string;
  stopRequested: boolean;
  killTimer?: NodeJS.Timeout;
  poll?: NodeJS.Timeout;
  exited: Promise<void>;
  onExit: () => void;
}

/**
 * Runs jobs. Emits `'job'` with the new {@link JobInfo} on every state change.
 *
 * @example
 * const jobs = new JobSupervisor({ store, sessionDir, clusterEnv: () => ({ RTJOB_ADDRESS: addr }) });
 * const job = jobs.submit({ entrypoint: ['train_ppo', '--async-train'] });
 */
export class JobSupervisor extends EventEmitter<{ job: [JobInfo] }> {
  readonly #opts: Required<Omit<JobSupervisorOptions, 'killJobActors'>> &
    Pick<JobSupervisorOptions, 'killJobActors'>;
  readonly #running = new Map<string, Running>();
  readonly #logDir: string;
  readonly #packageDir: string;
  #scheduleTimer: NodeJS.Timeout;
  #closed = false;

  constructor(opts: JobSupervisorOptions) {
    super();
    this.#opts = {
      capacity: () => ({ cpus: Number.POSITIVE_INFINITY, gpus: 0 }),
      stopGraceMs: 3000,
      messageTailLines: 20,
      builtins: {},
      // An option passed as undefined keeps its default (an undefined grace meant SIGKILL at once).
      ...(Object.fromEntries(
        Object.entries(opts).filter(([, v]) => v !== undefined),
      ) as JobSupervisorOptions),
    };
    this.#logDir = join(opts.sessionDir, 'logs');
    this.#packageDir = join(opts.sessionDir, 'packages');
    mkdirSync(this.#logDir, { recursive: true });
    mkdirSync(this.#packageDir, { recursive: true });
    this.#recover();
    // Capacity changes as nodes come and go, so pending jobs are also re-checked on a timer.
    this.#scheduleTimer = setInterval(() => this.#schedule(), 1000);
    this.#scheduleTimer.unref();
    queueMicrotask(() => this.#schedule());
  }

  /** Where uploaded working dirs are unpacked, one folder per content hash. */
  packagePath(hash: string): string {
    return join(this.#packageDir, hash);
  }

  /** Validates and records a job; it starts as soon as its entrypoint resources are free. */
  submit(req: JobSubmitRequest): JobInfo {
    if (this.#closed) throw new OpsError('BAD_REQUEST', 'the head is shutting down');
    const entrypoint = req.entrypoint;
    const argvOk =
      (typeof entrypoint === 'string' && entrypoint.length > 0) ||
      (Array.isArray(entrypoint) &&
        entrypoint.length > 0 &&
        entrypoint.every((a) => typeof a === 'string'));
    if (!argvOk)
      throw new OpsError(
        'BAD_REQUEST',
        'entrypoint must be a non-empty string or array of strings',
      );
    const jobId = req.jobId ?? newJobId();
    if (typeof jobId !== 'string' || !jobIdPattern.test(jobId)) {
      throw new OpsError(
        'BAD_REQUEST',
        `invalid job id ${JSON.stringify(jobId)}: use letters, digits, '_', '-', '.' (max 128)`,
      );
    }
    if (this.#opts.store.getJob(jobId))
      throw new OpsError('JOB_ID_TAKEN', `job id ${jobId} is already taken`);
    for (const [field, v] of [
      ['env', req.env],
      ['inheritedEnv', req.inheritedEnv],
      ['metadata', req.metadata],
    ] as const) {
      if (
        v !== undefined &&
        (typeof v !== 'object' || v === null || Object.values(v).some((x) => typeof x !== 'string'))
      ) {
        throw new OpsError('BAD_REQUEST', `${field} must be an object of strings`);
      }
    }
    const cpus = req.entrypointNumCpus ?? 0;
    const gpus = req.entrypointNumGpus ?? 0;
    if (typeof cpus !== 'number' || typeof gpus !== 'number' || !(cpus >= 0) || !(gpus >= 0)) {
      throw new OpsError('BAD_REQUEST', 'entrypoint resources must be non-negative numbers');
    }
    // A request no machine of this cluster could run fails now instead of waiting forever.
    const cap = this.#opts.capacity();
    if (cap.cpus > 0 && (cpus > cap.cpus || gpus > cap.gpus)) {
      throw new OpsError(
        'INFEASIBLE',
        `the entrypoint asks for ${cpus} CPUs and ${gpus} GPUs; the head's machine has ${cap.cpus} and ${cap.gpus}`,
      );
    }
    const cwd = this.#cwdFor(req);
    // Fails here, not later, so the submitter sees a missing entrypoint at once.
    resolveEntrypoint(entrypoint, cwd, req.env?.PATH ?? process.env.PATH, this.#opts.builtins);
    const job: JobInfo = {
      jobId,
      status: 'PENDING',
      entrypoint: typeof entrypoint === 'string' ? ['/bin/sh', '-c', entrypoint] : [...entrypoint],
      workingDir: req.workingDir ?? null,
      env: { ...req.env },
      inheritedEnvCount: Object.keys(req.inheritedEnv ?? {}).filter((k) => !(k in (req.env ?? {})))
        .length,
      metadata: { ...req.metadata, ...(req.cwd && !req.workingDir ? { cwd: req.cwd } : {}) },
      entrypointNumCpus: cpus,
      entrypointNumGpus: gpus,
      submittedAt: Date.now(),
      startedAt: null,
      endedAt: null,
      exitCode: null,
      message: '',
      driverPid: null,
      logPath: join(this.#logDir, `job-${jobId}.log`),
    };
    try {
      this.#opts.store.insertJob(job, req.inheritedEnv);
    } catch (err) {
      if (String(err).includes('UNIQUE'))
        throw new OpsError('JOB_ID_TAKEN', `job id ${jobId} is already taken`);
      throw err;
    }
    this.#opts.store.addEvent('job', jobId, `submitted: ${job.entrypoint.join(' ')}`);
    this.emit('job', job);
    queueMicrotask(() => this.#schedule());
    return job;
  }

  /** Stops a job: PENDING ones at once, running drivers with SIGTERM then SIGKILL. */
  async stop(jobId: string): Promise<JobInfo> {
    const job = this.get(jobId);
    if (terminalJobStatuses.has(job.status)) return job;
    if (job.status === 'PENDING') {
      return this.#finish(jobId, 'STOPPED', null, 'stopped before it started');
    }
    const run = this.#running.get(jobId);
    if (!run) return this.#finish(jobId, 'STOPPED', null, 'stopped (driver not found)');
    if (!run.stopRequested) {
      run.stopRequested = true;
      killGroup(run.pid, 'SIGTERM');
      const grace = stopGraceMs(this.#opts.store.report(jobId), this.#opts.stopGraceMs);
      run.killTimer = setTimeout(() => killGroup(run.pid, 'SIGKILL'), grace);
    }
    await run.exited;
    return this.get(jobId);
  }

  /** Deletes a finished job's record and metrics (its log file stays on disk). */
  delete(jobId: string): void {
    const job = this.get(jobId);
    if (!terminalJobStatuses.has(job.status)) {
      throw new OpsError(
        'JOB_NOT_TERMINAL',
        `job ${jobId} is ${job.status}; stop it before deleting it`,
      );
    }
    this.#opts.store.deleteJob(jobId);
    this.#opts.store.addEvent('job', jobId, 'deleted');
  }

  get(jobId: string): JobInfo {
    const job = this.#opts.store.getJob(jobId);
    if (!job) throw new OpsError('UNKNOWN_JOB', `no job with id ${jobId}`);
    return job;
  }

  list(): JobInfo[] {
    return this.#opts.store.listJobs();
  }

  /**
   * The drivers running now, each by its `sh` wrapper's pid: the leader of the process group
   * that holds the driver and whatever it started (the group goes when the driver ends).
   */
  drivers(): { jobId: string; pid: number }[] {
    return [...this.#running].map(([jobId, run]) => ({ jobId, pid: run.pid }));
  }

  /** Resolves once the job is in a terminal state. */
  waitFor(jobId: string): Promise<JobInfo> {
    return new Promise((resolve, reject) => {
      const check = (job: JobInfo) => {
        if (job.jobId === jobId && terminalJobStatuses.has(job.status)) {
          this.off('job', check);
          resolve(job);
        }
      };
      this.on('job', check);
      try {
        check(this.get(jobId));
      } catch (err) {
        this.off('job', check);
        reject(err);
      }
    });
  }

  /**
   * Stops the supervisor. With `stopJobs` (a clean cluster stop) every driver is stopped first;
   * without it (a head going away to be restarted) drivers keep running to be re-adopted.
   */
  async close(opts: { stopJobs?: boolean } = {}): Promise<void> {
    this.#closed = true;
    clearInterval(this.#scheduleTimer);
    if (opts.stopJobs) {
      await Promise.all(
        [...this.#running.keys()].map((id) => this.stop(id).catch(() => undefined)),
      );
      for (const job of this.#opts.store.listJobs({ status: ['PENDING'] })) {
        this.#finish(job.jobId, 'STOPPED', null, 'cluster stopped before the job started');
      }
    }
    for (const run of this.#running.values()) {
      if (run.poll) clearInterval(run.poll);
      if (run.killTimer) clearTimeout(run.killTimer);
    }
  }

  #cwdFor(req: { workingDir?: string | null; cwd?: string }): string {
    if (req.workingDir) {
      const m = /^pkg:\/\/([0-9a-f]+)$/.exec(req.workingDir);
      if (!m || !isPackageHash(m[1]!)) {
        throw new OpsError(
          'BAD_REQUEST',
          `workingDir must be pkg://<sha256> of an uploaded package, got ${req.workingDir}`,
        );
      }
      const dir = this.packagePath(m[1]!);
      if (!existsSync(dir))
        throw new OpsError('PACKAGE_NOT_FOUND', `package ${m[1]} was not uploaded to this head`);
      return dir;
    }
    if (req.cwd !== undefined) {
      if (typeof req.cwd !== 'string' || !existsSync(req.cwd) || !statSync(req.cwd).isDirectory()) {
        throw new OpsError('BAD_REQUEST', `cwd ${String(req.cwd)} is not a directory on the head`);
      }
      return req.cwd;
    }
    return process.cwd();
  }

  #schedule(): void {
    if (this.#closed) return;
    const pending = this.#opts.store.listJobs({ status: ['PENDING'] }).reverse();
    if (pending.length === 0) return;
    const cap = this.#opts.capacity();
    let usedCpus = 0;
    let usedGpus = 0;
    for (const id of this.#running.keys()) {
      const j = this.#opts.store.getJob(id);
      usedCpus += j?.entrypointNumCpus ?? 0;
      usedGpus += j?.entrypointNumGpus ?? 0;
    }
    for (const job of pending) {
      if (
        usedCpus + job.entrypointNumCpus > cap.cpus + 1e-9 ||
        usedGpus + job.entrypointNumGpus > cap.gpus + 1e-9
      ) {
        const msg = `waiting for ${job.entrypointNumCpus} CPU, ${job.entrypointNumGpus} GPU for the entrypoint`;
        if (job.message !== msg)
          this.emit('job', this.#opts.store.updateJob(job.jobId, { message: msg })!);
        continue;
      }
      usedCpus += job.entrypointNumCpus;
      usedGpus += job.entrypointNumGpus;
      this.#start(job);
    }
  }

  #start(job: JobInfo): void {
    let argv: string[];
    let cwd: string;
    try {
      cwd = job.workingDir
        ? this.#cwdFor({ workingDir: job.workingDir })
        : (job.metadata.cwd ?? process.cwd());
      argv = resolveEntrypoint(
        job.entrypoint,
        cwd,
        job.env.PATH ?? process.env.PATH,
        this.#opts.builtins,
      );
      // An uploaded working dir gets its npm dependencies before the driver starts in it.
      if (job.workingDir && needsDependencies(cwd))
        argv = withDependencies(
          argv,
          cwd,
          ownModuleNodeFlags(tsxImport),
          job.env.RTJOB_SUBMITTER_MODULES,
        );
    } catch (err) {
      this.#finish(job.jobId, 'FAILED', null, `could not start: ${(err as Error).message}`);
      return;
    }
    const exitFile = join(this.#logDir, `job-${job.jobId}.exit`);
    const out = openSync(job.logPath, 'a');
    // RTJOB_WORKING_DIR travels in the job env to every worker, which runs in it too.
    // RTJOB_PACKAGE lets a node without the head's copy fetch the package and run in its own.
    const pkg = /^pkg:\/\/([0-9a-f]{64})$/.exec(job.workingDir ?? '')?.[1];
    const jobEnv: Record<string, string> = {
      ...this.#opts.store.inheritedEnv(job.jobId),
      ...job.env,
      RTJOB_WORKING_DIR: cwd,
      ...(pkg ? { RTJOB_PACKAGE: pkg } : {}),
    };
    let pid: number;
    try {
      const child = spawn(
        '/bin/sh',
        // The wrapper records the driver's exit status on disk for a head that restarts meanwhile.
        // Its no-op traps make it outlive a SIGTERM to the group until the driver has exited, so
        // the wrapper's exit means the driver is gone (and reaped), never merely signalled. A
        // trapped signal interrupts `wait` (dash even stops waiting for a foreground command),
        // so the driver runs in the background and is waited for until it is really reaped.
        ['-c', wrapperScript, exitFile, ...argv],
        {
          cwd,
          detached: true,
          stdio: ['ignore', out, out],
          env: {
            ...process.env,
            ...this.#opts.clusterEnv(),
            ...jobEnv,
            // Objects the driver gets land in fresh buffers: back them with huge pages.
            GLIBC_TUNABLES: largePageMallocEnv(jobEnv.GLIBC_TUNABLES ?? process.env.GLIBC_TUNABLES),
            RTJOB_JOB_ID: job.jobId,
            RTJOB_JOB_ENV: JSON.stringify(jobEnv),
          },
        },
      );
      if (child.pid === undefined) throw new OpsError('ENTRYPOINT_NOT_FOUND', 'spawn failed');
      pid = child.pid;
      child.on('error', () => undefined);
      const run = this.#track(job.jobId, pid, exitFile);
      child.on('exit', (code, signal) => {
        const exitCode = code ?? (signal ? 128 + (signalNumbers[signal] ?? 0) : null);
        this.#onDriverExit(job.jobId, run, exitCode);
      });
    } catch (err) {
      closeSync(out);
      this.#finish(
        job.jobId,
        'FAILED',
        null,
        `could not start the driver: ${(err as Error).message}`,
      );
      return;
    }
    closeSync(out);
    this.#opts.store.addLogFile({
      path: job.logPath,
      kind: 'driver',
      jobId: job.jobId,
      actorId: null,
      nodeId: null,
      pid,
      createdAt: Date.now(),
    });
    const updated = this.#opts.store.updateJob(job.jobId, {
      status: 'RUNNING',
      startedAt: Date.now(),
      driverPid: pid,
      message: '',
    })!;
    this.#opts.store.addEvent('job', job.jobId, `running (pid ${pid})`);
    this.emit('job', updated);
  }

  #track(jobId: string, pid: number, exitFile: string): Running {
    let onExit!: () => void;
    const exited = new Promise<void>((r) => (onExit = r));
    const run: Running = { pid, exitFile, stopRequested: false, exited, onExit };
    this.#running.set(jobId, run);
    return run;
  }

  #onDriverExit(jobId: string, run: Running, exitCode: number | null): void {
    if (this.#running.get(jobId) !== run) return;
    this.#running.delete(jobId);
    if (run.killTimer) clearTimeout(run.killTimer);
    if (run.poll) clearInterval(run.poll);
    // Anything the driver left in its process group goes with it.
    killGroup(run.pid, 'SIGKILL');
    const job = this.#opts.store.getJob(jobId);
    if (job && !terminalJobStatuses.has(job.status)) {
      if (run.stopRequested) this.#finish(jobId, 'STOPPED', exitCode, 'stopped by request');
      else if (exitCode === 0) this.#finish(jobId, 'SUCCEEDED', 0, '');
      else {
        const tail = tailLines(job.logPath, this.#opts.messageTailLines);
        const why =
          exitCode === null
            ? 'driver exited; its exit code was lost'
            : `driver exited with code ${exitCode}`;
        this.#finish(jobId, 'FAILED', exitCode, tail ? `${why}; last output:\n${tail}` : why);
      }
    }
    run.onExit();
    void Promise.resolve(this.#opts.killJobActors?.(jobId)).catch(() => undefined);
    this.#schedule();
  }

  #finish(jobId: string, status: JobStatus, exitCode: number | null, message: string): JobInfo {
    const job = this.#opts.store.updateJob(jobId, {
      status,
      exitCode,
      message,
      endedAt: Date.now(),
    })!;
    this.#opts.store.addEvent(
      'job',
      jobId,
      `${status.toLowerCase()}${exitCode !== null ? ` (exit ${exitCode})` : ''}`,
    );
    this.emit('job', job);
    return job;
  }

  /** Re-adopts drivers that kept running while the head was down, or records how they ended. */
  #recover(): void {
    for (const job of this.#opts.store.listJobs({ status: ['RUNNING'] })) {
      const exitFile = join(this.#logDir, `job-${job.jobId}.exit`);
      const readExit = (): number | null => {
        try {
          const n = Number.parseInt(readFileSync(exitFile, 'utf8').trim(), 10);
          return Number.isFinite(n) ? n : null;
        } catch {
          return null;
        }
      };
      const pid = job.driverPid;
      if (pid !== null && pidAlive(pid) && ownsPid(pid, exitFile)) {
        const run = this.#track(job.jobId, pid, exitFile);
        run.poll = setInterval(() => {
          if (!pidAlive(pid) || !ownsPid(pid, exitFile))
            this.#onDriverExit(job.jobId, run, readExit());
        }, 250);
        this.#opts.store.addEvent(
          'job',
          job.jobId,
          `re-adopted driver pid ${pid} after a head restart`,
        );
      } else {
        const run = this.#track(job.jobId, pid ?? 0, exitFile);
        this.#onDriverExit(job.jobId, run, readExit());
      }
    }
  }
}

/**
 * Stops the drivers of a session whose head is gone (it would have stopped them itself): SIGTERM
 * to each running job's process group, SIGKILL after `graceMs`. The next head on the session
 * records how they ended. Returns how many drivers were signalled.
 */
export async function stopOrphanDrivers(
  store: OpsStore,
  sessionDir: string,
  graceMs = 3000,
): Promise<number> {
  const groups: number[] = [];
  for (const job of store.listJobs({ status: ['RUNNING'] })) {
    const exitFile = join(sessionDir, 'logs', `job-${job.jobId}.exit`);
    if (job.driverPid !== null && pidAlive(job.driverPid) && ownsPid(job.driverPid, exitFile))
      groups.push(job.driverPid);
  }
  for (const pid of groups) killGroup(pid, 'SIGTERM');
  const deadline = Date.now() + graceMs;
  while (groups.some(pidAlive) && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 50));
  for (const pid of groups.filter(pidAlive)) killGroup(pid, 'SIGKILL');
  return groups.length;
}

/** True when `pid` is still our wrapper (guards against a reused pid after a long outage). */
function ownsPid(pid: number, exitFile: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(exitFile);
  } catch {
    // No procfs (macOS): trust liveness.
    return existsSync(`/proc`) ? false : true;
  }
}

const signalNumbers: Partial<Record<NodeJS.Signals, number>> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGKILL: 9,
  SIGSEGV: 11,
  SIGPIPE: 13,
  SIGTERM: 15,
};
