/**
 * The cluster-operations tables — jobs, job metrics, events and the log-file index — kept in the
 * head's SQLite database next to the runtime's own tables (nodes, actors, placement groups, kv).
 * This module is the only place that touches their SQL.
 *
 * Over 600 lines on purpose: all the SQL in one place is the rule, and the tables share one
 * database handle and its prepared statements.
 *
 * @module
 */
import Database from 'better-sqlite3';
import { OpsError } from './errors.ts';

/** A job's lifecycle; the last three are terminal and never change again. */
export type JobStatus = 'PENDING' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'STOPPED';

/** Most distinct metric names one job may log. */
export const maxMetricNames = 1000;
/** Most cells (steps × names) one page of a metrics table holds. */
export const metricsPageCells = 1_000_000;

export const terminalJobStatuses: ReadonlySet<JobStatus> = new Set([
  'SUCCEEDED',
  'FAILED',
  'STOPPED',
]);

/** Everything the head knows about one job, as the API returns it. Times are epoch ms. */
export interface JobInfo {
  jobId: string;
  status: JobStatus;
  /** argv of the driver as the user gave it (`['train_ppo', '--async-train']`). */
  entrypoint: string[];
  /** `pkg://<sha256>` when a working dir was uploaded. */
  workingDir: string | null;
  /**
   * Env shown with the job: the `--env` pairs and the caller's job-relevant variables (`ASYNC_*`,
   * `RTJOB_*`, `OPENRLHF_*`, `CUDA_VISIBLE_DEVICES`, `NODE_OPTIONS`). Reaches the driver and its
   * workers.
   */
  env: Record<string, string>;
  /** How many other inherited variables the driver and workers also get (never shown). */
  inheritedEnvCount: number;
  metadata: Record<string, string>;
  entrypointNumCpus: number;
  entrypointNumGpus: number;
  submittedAt: number;
  startedAt: number | null;
  endedAt: number | null;
  exitCode: number | null;
  message: string;
  driverPid: number | null;
  logPath: string;
}

/** One row of training metrics as `metrics.log(step, values)` sent it. */
export interface MetricRow {
  step: number;
  time: number;
  /** `null` (a NaN or infinity sent as JSON) is not stored. */
  values: Record<string, number | null>;
}

/** A job's metrics as a table: one row per step, one column per metric (`step` first). */
export interface MetricsTable {
  columns: string[];
  rows: (number | null)[][];
  /** Where the next page starts (`sinceStep`), null on the last page. */
  nextSinceStep: number | null;
}

/**
 * One sample a job logged for a step (for `train_ppo`, an episode: prompt, turns, its reward as
 * the score, …). The head indexes `key` (the same prompt across steps) and `score` (what the job
 * calls it is its report's `samples.score`); every other field is kept as the job sent it.
 */
export interface JobSample {
  /** Groups samples across steps ("this prompt over time"), e.g. the prompt's dataset index. */
  key?: string;
  /** The number samples are filtered by (best, worst, above a bound). */
  score?: number;
  [field: string]: unknown;
}

/** A stored sample, as the API returns it. */
export type StoredSample = JobSample & { step: number; seq: number };

/**
 * How much sample data the head keeps per job. A step's samples replace any it had (retries are
 * idempotent); once a job holds more than `maxPerJob`, the oldest steps are dropped, except the
 * first step, which stays as the reference point for "before".
 */
export const sampleLimits = {
  /** Samples per step. */
  maxPerStep: 256,
  /** Samples per job (at 64 KiB each, at most ~640 MiB; typically a few KiB each). */
  maxPerJob: 10_000,
  /** JSON bytes of one sample. */
  maxSampleBytes: 64 * 1024,
} as const;

/**
 * What a job's driver says about itself (`metrics.info`): any JSON fields, merged by name. The
 * head and the dashboard read `totalSteps` (progress and ETA), `headline` (the metric the jobs
 * list shows, e.g. `eval_accuracy`), `charts` (how the job page lays out its metrics), `config`
 * (a table of every effective setting) and `outputs` (paths the run writes, by label).
 */
export interface JobReport {
  totalSteps?: number;
  headline?: string;
  charts?: ChartLayout;
  config?: ConfigRow[];
  outputs?: Record<string, string>;
  /**
   * What losing one of the job's actors does to the job, by the actor's class name: the
   * dashboard says it before a kill or restart. `fatal`: the job fails without it.
   */
  roles?: Record<string, { fate: string; fatal?: boolean }>;
  /** The job's latest checkpoint (see {@link JobCheckpoint}). */
  checkpoint?: JobCheckpoint;
  /** The job page's summary cards after its progress, in order (see {@link SummaryCard}). */
  summary?: SummaryCard[];
  /** What the job calls its samples' `score` (e.g. `reward`), for the pages that show it. */
  samples?: { score?: string };
  /** The verdict on the job's ledger (`ledger-store.ts`) and what its entries are (`noun`). */
  ledger?: { verdict: string; ok: boolean; noun?: string; short?: string };
  /** How long a stop waits for the driver after SIGTERM before its SIGKILL (ms). */
  stopGraceMs?: number;
  [field: string]: unknown;
}

/**
 * A summary card of a job page, named by the job: the dashboard knows no metric by name. With
 * `metric`, the metric's first → last value (`percent`: a fraction shown as %); with `counts`, the
 * last value of each counter with its noun (`3 episodes failed · 1 group dropped`), shown once
 * the first counter is logged and marked when it is not 0.
 */
export interface SummaryCard {
  /** The card's element id is `sum-<id>`. */
  id: string;
  title: string;
  metric?: string;
  format?: 'percent' | 'number';
  counts?: { metric: string; one: string; many: string }[];
}

/** A job's latest checkpoint: its step, and the flags that make a new run resume from it. */
export interface JobCheckpoint {
  step: number;
  /** Added to the job's command, e.g. `--ckpt-path /abs/ckpt --load-checkpoint`. */
  resumeFlags: string;
}

/**
 * How the job page lays out a job's metric charts. Without one, every metric is a chart of one
 * group, in name order.
 */
export interface ChartLayout {
  /**
   * Groups in page order. A metric goes to the first group that lists it in `first` or whose
   * `match` (a regular expression's source) matches its name; the rest go to the last group.
   */
  groups: { title: string; first?: string[]; match?: string }[];
  /** Charts that draw several metrics, one line each, by chart name. */
  multi?: Record<string, { title: string; members: string[] }>;
  /** Metrics charted even when they never change (a flat headline is news, not noise). */
  neverFolded?: string[];
  /** Metrics logged for export but never charted (a counter that is the step again). */
  hidden?: string[];
  /** The metric that counts generated tokens so far: the page offers it as an x axis. */
  tokens?: string;
}

/** One effective setting of a job. */
export interface ConfigRow {
  /** `--rollout-batch-size`, or an env variable's name. */
  name: string;
  value: string;
  default?: string;
  /**
   * Where the value came from: a flag, the environment, the default, or what the run found as
   * it started (`run`: e.g. each role's backend, device and precision).
   */
  source: 'flag' | 'env' | 'default' | 'run';
  section?: string;
  help?: string;
}

/** How far a job is, from its metrics and its report (the jobs list, the job page). */
export interface JobProgress {
  /** The last step that logged metrics. */
  step: number | null;
  totalSteps: number | null;
  /** Estimated time to the last step, from the pace so far (running jobs only). */
  etaMs: number | null;
  /** The job's headline metric (its report's `headline`), first and last value. */
  headline: { name: string; first: number | null; last: number | null } | null;
}

/** A cluster event: job state changes, actor deaths, node joins, head restarts. */
export interface ClusterEvent {
  id: number;
  time: number;
  kind: string;
  subject: string;
  message: string;
}

/** A log file the head knows about: a driver's or a worker's combined stdout/stderr. */
export interface LogFile {
  path: string;
  kind: 'driver' | 'worker';
  jobId: string | null;
  actorId: string | null;
  nodeId: string | null;
  pid: number | null;
  createdAt: number;
}

const schema = `
CREATE TABLE IF NOT EXISTS ops_jobs (
  job_id TEXT PRIMARY KEY,
  status TEXT NOT NULL,
  entrypoint TEXT NOT NULL,
  working_dir TEXT,
  env TEXT NOT NULL,
  inherited_env TEXT NOT NULL DEFAULT '{}',
  metadata TEXT NOT NULL,
  entrypoint_num_cpus REAL NOT NULL,
  entrypoint_num_gpus REAL NOT NULL,
  submitted_at INTEGER NOT NULL,
  started_at INTEGER,
  ended_at INTEGER,
  exit_code INTEGER,
  message TEXT NOT NULL,
  driver_pid INTEGER,
  log_path TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS ops_jobs_submitted ON ops_jobs(submitted_at);
CREATE TABLE IF NOT EXISTS ops_job_metrics (
  job_id TEXT NOT NULL,
  step INTEGER NOT NULL,
  name TEXT NOT NULL,
  value REAL,
  time INTEGER NOT NULL,
  PRIMARY KEY (job_id, name, step)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ops_job_metrics_step ON ops_job_metrics(job_id, step);
CREATE TABLE IF NOT EXISTS ops_job_samples (
  job_id TEXT NOT NULL,
  step INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  sample_key TEXT,
  score REAL,
  data TEXT NOT NULL,
  PRIMARY KEY (job_id, step, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ops_job_samples_key ON ops_job_samples(job_id, sample_key, step);
CREATE TABLE IF NOT EXISTS ops_job_ledger (
  job_id TEXT NOT NULL,
  entry_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  status TEXT NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (job_id, entry_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ops_job_ledger_seq ON ops_job_ledger(job_id, seq);
CREATE TABLE IF NOT EXISTS ops_job_info (
  job_id TEXT PRIMARY KEY,
  info TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ops_events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  time INTEGER NOT NULL,
  kind TEXT NOT NULL,
  subject TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ops_log_files (
  path TEXT PRIMARY KEY,
  kind TEXT NOT NULL,
  job_id TEXT,
  actor_id TEXT,
  node_id TEXT,
  pid INTEGER,
  created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ops_log_files_job ON ops_log_files(job_id);
CREATE INDEX IF NOT EXISTS ops_log_files_actor ON ops_log_files(actor_id);
`;

/**
 * Session dirs from before samples had a `score`: train_ppo sent `reward` (and `groupRewardMean`),
 * and the head indexed it under that name. Renames the column and the fields in each stored sample.
 */
function migrateSampleScores(db: Database.Database): void {
  const cols = db.prepare('PRAGMA table_info(ops_job_samples)').all() as { name: string }[];
  if (!cols.some((c) => c.name === 'reward')) return;
  const old = (f: string) => `'$.${f}'`;
  db.transaction(() => {
    db.exec('ALTER TABLE ops_job_samples RENAME COLUMN reward TO score');
    for (const [from, to] of [
      ['reward', 'score'],
      ['groupRewardMean', 'groupScoreMean'],
    ])
      db.exec(
        `UPDATE ops_job_samples SET data = json_set(json_remove(data, ${old(from!)}), ${old(to!)}, json_extract(data, ${old(from!)}))
         WHERE json_type(data, ${old(from!)}) IS NOT NULL`,
      );
  })();
}

interface JobRow {
  job_id: string;
  status: JobStatus;
  entrypoint: string;
  working_dir: string | null;
  env: string;
  inherited_env: string;
  metadata: string;
  entrypoint_num_cpus: number;
  entrypoint_num_gpus: number;
  submitted_at: number;
  started_at: number | null;
  ended_at: number | null;
  exit_code: number | null;
  message: string;
  driver_pid: number | null;
  log_path: string;
}

function toJob(r: JobRow): JobInfo {
  return {
    jobId: r.job_id,
    status: r.status,
    entrypoint: JSON.parse(r.entrypoint) as string[],
    workingDir: r.working_dir,
    env: JSON.parse(r.env) as Record<string, string>,
    inheritedEnvCount: Object.keys(JSON.parse(r.inherited_env || '{}') as object).length,
    metadata: JSON.parse(r.metadata) as Record<string, string>,
    entrypointNumCpus: r.entrypoint_num_cpus,
    entrypointNumGpus: r.entrypoint_num_gpus,
    submittedAt: r.submitted_at,
    startedAt: r.started_at,
    endedAt: r.ended_at,
    exitCode: r.exit_code,
    message: r.message,
    driverPid: r.driver_pid,
    logPath: r.log_path,
  };
}

/** Fields of a job that change after submission. */
export type JobUpdate = Partial<
  Pick<JobInfo, 'status' | 'startedAt' | 'endedAt' | 'exitCode' | 'message' | 'driverPid'>
>;

const updateColumns: Record<keyof JobUpdate, string> = {
  status: 'status',
  startedAt: 'started_at',
  endedAt: 'ended_at',
  exitCode: 'exit_code',
  message: 'message',
  driverPid: 'driver_pid',
};

/**
 * Opens (or creates) the operations tables in `db`, or in a database file of their own.
 *
 * @example
 * const store = new OpsStore(join(sessionDir, 'ops.db'));
 * store.insertJob(job);
 */
export class OpsStore {
  readonly db: Database.Database;
  readonly #ownsDb: boolean;
  readonly #insertJob: Database.Statement;
  readonly #getJob: Database.Statement;
  readonly #insertMetric: Database.Statement;
  readonly #insertEvent: Database.Statement;

  /** `dbOrPath`: an open better-sqlite3 handle (shared with the runtime store) or a file path. */
  constructor(dbOrPath: Database.Database | string) {
    this.#ownsDb = typeof dbOrPath === 'string';
    this.db = typeof dbOrPath === 'string' ? new Database(dbOrPath) : dbOrPath;
    if (this.#ownsDb) {
      this.db.pragma('journal_mode = WAL');
      this.db.pragma('synchronous = NORMAL');
      this.db.pragma('busy_timeout = 5000');
    }
    this.db.exec(schema);
    // Session dirs from before the column existed.
    const cols = this.db.prepare('PRAGMA table_info(ops_jobs)').all() as { name: string }[];
    if (!cols.some((c) => c.name === 'inherited_env')) {
      this.db.exec("ALTER TABLE ops_jobs ADD COLUMN inherited_env TEXT NOT NULL DEFAULT '{}'");
    }
    migrateSampleScores(this.db);
    this.#insertJob = this.db.prepare(
      `INSERT INTO ops_jobs (job_id, status, entrypoint, working_dir, env, inherited_env, metadata,
        entrypoint_num_cpus, entrypoint_num_gpus, submitted_at, started_at, ended_at, exit_code,
        message, driver_pid, log_path)
       VALUES (@job_id, @status, @entrypoint, @working_dir, @env, @inherited_env, @metadata, @entrypoint_num_cpus,
        @entrypoint_num_gpus, @submitted_at, @started_at, @ended_at, @exit_code, @message,
        @driver_pid, @log_path)`,
    );
    this.#getJob = this.db.prepare('SELECT * FROM ops_jobs WHERE job_id = ?');
    this.#insertMetric = this.db.prepare(
      `INSERT OR REPLACE INTO ops_job_metrics (job_id, step, name, value, time) VALUES (?, ?, ?, ?, ?)`,
    );
    this.#insertEvent = this.db.prepare(
      'INSERT INTO ops_events (time, kind, subject, message) VALUES (?, ?, ?, ?)',
    );
  }

  /**
   * Inserts a new job; throws a SQLite constraint error when the id is taken. `inheritedEnv` is
   * kept for starting the driver but never returned by the API.
   */
  insertJob(job: JobInfo, inheritedEnv: Record<string, string> = {}): void {
    this.#insertJob.run({
      job_id: job.jobId,
      status: job.status,
      entrypoint: JSON.stringify(job.entrypoint),
      working_dir: job.workingDir,
      env: JSON.stringify(job.env),
      inherited_env: JSON.stringify(inheritedEnv),
      metadata: JSON.stringify(job.metadata),
      entrypoint_num_cpus: job.entrypointNumCpus,
      entrypoint_num_gpus: job.entrypointNumGpus,
      submitted_at: job.submittedAt,
      started_at: job.startedAt,
      ended_at: job.endedAt,
      exit_code: job.exitCode,
      message: job.message,
      driver_pid: job.driverPid,
      log_path: job.logPath,
    });
  }

  /** The inherited variables of a job (see {@link insertJob}). */
  inheritedEnv(jobId: string): Record<string, string> {
    const row = this.db
      .prepare('SELECT inherited_env FROM ops_jobs WHERE job_id = ?')
      .get(jobId) as { inherited_env: string } | undefined;
    return JSON.parse(row?.inherited_env || '{}') as Record<string, string>;
  }

  getJob(jobId: string): JobInfo | undefined {
    const row = this.#getJob.get(jobId) as JobRow | undefined;
    return row ? toJob(row) : undefined;
  }

  /** All jobs, newest first. */
  listJobs(opts: { status?: JobStatus[]; limit?: number } = {}): JobInfo[] {
    const where = opts.status?.length
      ? `WHERE status IN (${opts.status.map(() => '?').join(',')})`
      : '';
    const rows = this.db
      .prepare(`SELECT * FROM ops_jobs ${where} ORDER BY submitted_at DESC, rowid DESC LIMIT ?`)
      .all(...(opts.status ?? []), opts.limit ?? -1) as JobRow[];
    return rows.map(toJob);
  }

  updateJob(jobId: string, update: JobUpdate): JobInfo | undefined {
    const keys = Object.keys(update) as (keyof JobUpdate)[];
    if (keys.length > 0) {
      const set = keys.map((k) => `${updateColumns[k]} = @${k}`).join(', ');
      this.db.prepare(`UPDATE ops_jobs SET ${set} WHERE job_id = @jobId`).run({ ...update, jobId });
    }
    return this.getJob(jobId);
  }

  /** Deletes a job with its metrics and log index rows (the log files stay on disk). */
  deleteJob(jobId: string): void {
    this.db.transaction(() => {
      this.db.prepare('DELETE FROM ops_jobs WHERE job_id = ?').run(jobId);
      this.db.prepare('DELETE FROM ops_job_metrics WHERE job_id = ?').run(jobId);
      this.db.prepare('DELETE FROM ops_job_samples WHERE job_id = ?').run(jobId);
      this.db.prepare('DELETE FROM ops_job_ledger WHERE job_id = ?').run(jobId);
      this.db.prepare('DELETE FROM ops_job_info WHERE job_id = ?').run(jobId);
    })();
  }

  /** Stores metric rows in one transaction; a repeated (step, name) overwrites the old value. */
  /**
   * Stores metric rows. A job may log at most `maxMetricNames` distinct names: rows that would
   * add more are refused whole (`BAD_REQUEST`), so one job cannot make its table unbounded.
   */
  addMetrics(jobId: string, rows: readonly MetricRow[]): void {
    const fresh = new Set<string>();
    for (const row of rows) for (const name of Object.keys(row.values)) fresh.add(name);
    if (fresh.size > 0) {
      const known = this.db.prepare(
        'SELECT 1 FROM ops_job_metrics WHERE job_id = ? AND name = ? LIMIT 1',
      );
      for (const name of [...fresh]) if (known.get(jobId, name)) fresh.delete(name);
      const total = fresh.size === 0 ? 0 : this.metricNameCount(jobId) + fresh.size;
      if (total > maxMetricNames) {
        throw new OpsError(
          'BAD_REQUEST',
          `job ${jobId} would log ${total} distinct metric names; the limit is ${maxMetricNames}`,
        );
      }
    }
    this.db.transaction(() => {
      for (const row of rows) {
        for (const [name, value] of Object.entries(row.values)) {
          if (typeof value !== 'number') continue;
          this.#insertMetric.run(
            jobId,
            row.step,
            name,
            Number.isFinite(value) ? value : null,
            row.time,
          );
        }
      }
    })();
  }

  /**
   * One page of a job's metrics as a table: one row per step, one column per metric name the job
   * logged after `sinceStep` (sorted; the same on every page of one read), `null` where a step
   * did not log that name. A page holds at most `maxSteps` steps and `metricsPageCells` cells,
   * so a job with many names gets shorter pages, never a huge matrix; `nextSinceStep` is where
   * the next page starts (`null` on the last).
   */
  metricsTable(jobId: string, sinceStep = -Infinity, maxSteps = 10_000): MetricsTable {
    const since = Number.isFinite(sinceStep) ? sinceStep : -9007199254740991;
    const names = (
      this.db
        .prepare(
          'SELECT DISTINCT name FROM ops_job_metrics WHERE job_id = ? AND step > ? ORDER BY name',
        )
        .all(jobId, since) as { name: string }[]
    ).map((r) => r.name);
    const perPage = Math.max(
      1,
      Math.min(maxSteps, Math.floor(metricsPageCells / Math.max(1, names.length))),
    );
    const steps = (
      this.db
        .prepare(
          'SELECT DISTINCT step FROM ops_job_metrics WHERE job_id = ? AND step > ? ORDER BY step LIMIT ?',
        )
        .all(jobId, since, perPage + 1) as { step: number }[]
    ).map((r) => r.step);
    const more = steps.length > perPage;
    const last = steps[Math.min(steps.length, perPage) - 1];
    if (last === undefined)
      return { columns: ['step', 'time', ...names], rows: [], nextSinceStep: null };
    const data = this.db
      .prepare(
        'SELECT step, name, value, time FROM ops_job_metrics WHERE job_id = ? AND step > ? AND step <= ? ORDER BY step',
      )
      .all(jobId, since, last) as {
      step: number;
      name: string;
      value: number | null;
      time: number;
    }[];
    const col = new Map(names.map((n, i) => [n, i + 2]));
    const byStep = new Map<number, (number | null)[]>();
    for (const d of data) {
      let row = byStep.get(d.step);
      if (!row) {
        row = [d.step, d.time, ...names.map(() => null)];
        byStep.set(d.step, row);
      }
      const i = col.get(d.name);
      if (i !== undefined) row[i] = d.value;
      if (d.time > (row[1] ?? 0)) row[1] = d.time;
    }
    return {
      columns: ['step', 'time', ...names],
      rows: [...byStep.values()],
      nextSinceStep: more ? last : null,
    };
  }

  /** How many distinct metric names a job has logged. */
  metricNameCount(jobId: string): number {
    return (
      this.db
        .prepare('SELECT COUNT(DISTINCT name) AS n FROM ops_job_metrics WHERE job_id = ?')
        .get(jobId) as {
        n: number;
      }
    ).n;
  }

  /**
   * The table with at most `maxPoints` rows for long runs: steps are cut into equal buckets and
   * each bucket keeps, per metric, the mean of its values at the bucket's last step (so a
   * 100,000-step run still draws its trend, and the first and last steps are kept as they are).
   */
  static downsample(
    t: { columns: string[]; rows: (number | null)[][] },
    maxPoints: number,
  ): { columns: string[]; rows: (number | null)[][] } {
    const n = t.rows.length;
    if (maxPoints < 2 || n <= maxPoints) return t;
    const out: (number | null)[][] = [t.rows[0]!];
    const inner = maxPoints - 2;
    const size = (n - 2) / inner;
    for (let b = 0; b < inner; b++) {
      const bucket = t.rows.slice(1 + Math.floor(b * size), 1 + Math.floor((b + 1) * size));
      if (bucket.length === 0) continue;
      const last = bucket.at(-1)!;
      const row: (number | null)[] = [last[0]!, last[1]!];
      for (let c = 2; c < t.columns.length; c++) {
        const vs = bucket
          .map((r) => r[c])
          .filter((v): v is number => v !== null && v !== undefined);
        row.push(vs.length ? vs.reduce((a, v) => a + v, 0) / vs.length : null);
      }
      out.push(row);
    }
    out.push(t.rows[n - 1]!);
    return { columns: t.columns, rows: out };
  }

  /**
   * Stores the samples of one step, replacing what that step had; then drops the oldest steps
   * (never the first) while the job holds more than {@link sampleLimits}`.maxPerJob`. Throws an
   * `OpsError` `BAD_REQUEST` when the step has too many samples or one is too large.
   */
  addSamples(jobId: string, step: number, samples: readonly JobSample[]): void {
    if (samples.length > sampleLimits.maxPerStep) {
      throw new OpsError(
        'BAD_REQUEST',
        `at most ${sampleLimits.maxPerStep} samples per step (got ${samples.length})`,
      );
    }
    const rows = samples.map((sample, seq) => {
      const data = JSON.stringify(sample);
      if (Buffer.byteLength(data) > sampleLimits.maxSampleBytes) {
        throw new OpsError(
          'BAD_REQUEST',
          `sample ${seq} of step ${step} is over ${sampleLimits.maxSampleBytes} bytes of JSON; shorten its text`,
        );
      }
      const score =
        typeof sample.score === 'number' && Number.isFinite(sample.score) ? sample.score : null;
      return [
        jobId,
        step,
        seq,
        sample.key === undefined ? null : String(sample.key),
        score,
        data,
      ] as const;
    });
    const insert = this.db.prepare(
      'INSERT INTO ops_job_samples (job_id, step, seq, sample_key, score, data) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.db.transaction(() => {
      this.db.prepare('DELETE FROM ops_job_samples WHERE job_id = ? AND step = ?').run(jobId, step);
      for (const r of rows) insert.run(...r);
      const count = () =>
        (
          this.db
            .prepare('SELECT COUNT(*) AS n FROM ops_job_samples WHERE job_id = ?')
            .get(jobId) as { n: number }
        ).n;
      let over = count() - sampleLimits.maxPerJob;
      if (over <= 0) return;
      // Whole steps go, oldest first, keeping the first step (the "before" of the run).
      const steps = this.db
        .prepare(
          'SELECT step, COUNT(*) AS n FROM ops_job_samples WHERE job_id = ? GROUP BY step ORDER BY step',
        )
        .all(jobId) as { step: number; n: number }[];
      const del = this.db.prepare('DELETE FROM ops_job_samples WHERE job_id = ? AND step = ?');
      for (const s of steps.slice(1, -1)) {
        if (over <= 0) break;
        del.run(jobId, s.step);
        over -= s.n;
      }
    })();
  }

  /** Merges `fields` into the job's report (a field given again replaces the old value). */
  mergeReport(jobId: string, fields: JobReport): JobReport {
    const merged = { ...this.report(jobId), ...fields };
    this.db
      .prepare(
        'INSERT INTO ops_job_info (job_id, info) VALUES (?, ?) ON CONFLICT(job_id) DO UPDATE SET info = excluded.info',
      )
      .run(jobId, JSON.stringify(merged));
    return merged;
  }

  /** The job's report; `{}` when its driver sent none. */
  report(jobId: string): JobReport {
    const row = this.db.prepare('SELECT info FROM ops_job_info WHERE job_id = ?').get(jobId) as
      | { info: string }
      | undefined;
    return row ? (JSON.parse(row.info) as JobReport) : {};
  }

  /** Progress of each job, from its metrics and report; `running` jobs also get an ETA. */
  progress(
    jobIds: readonly string[],
    running: ReadonlySet<string> = new Set(),
  ): Map<string, JobProgress> {
    const out = new Map<string, JobProgress>();
    // Each an index lookup (job_id, step), so a long run's list entry costs no scan.
    const steps = this.db.prepare(
      `SELECT (SELECT step FROM ops_job_metrics WHERE job_id = @job ORDER BY step LIMIT 1) AS first,
              (SELECT step FROM ops_job_metrics WHERE job_id = @job ORDER BY step DESC LIMIT 1) AS last,
              (SELECT time FROM ops_job_metrics WHERE job_id = @job ORDER BY step LIMIT 1) AS t0,
              (SELECT time FROM ops_job_metrics WHERE job_id = @job ORDER BY step DESC LIMIT 1) AS t1`,
    );
    const ends = this.db.prepare(
      `SELECT (SELECT value FROM ops_job_metrics WHERE job_id = @job AND name = @name AND value IS NOT NULL ORDER BY step LIMIT 1) AS first,
              (SELECT value FROM ops_job_metrics WHERE job_id = @job AND name = @name AND value IS NOT NULL ORDER BY step DESC LIMIT 1) AS last`,
    );
    for (const jobId of jobIds) {
      const r = steps.get({ job: jobId }) as {
        first: number | null;
        last: number | null;
        t0: number | null;
        t1: number | null;
      };
      const report = this.report(jobId);
      const total = typeof report.totalSteps === 'number' ? report.totalSteps : null;
      let etaMs: number | null = null;
      if (
        running.has(jobId) &&
        total !== null &&
        r.last !== null &&
        r.first !== null &&
        r.last > r.first &&
        r.t0 !== null &&
        r.t1 !== null
      ) {
        etaMs = Math.max(0, ((r.t1 - r.t0) / (r.last - r.first)) * (total - r.last));
      }
      const name = typeof report.headline === 'string' ? report.headline : undefined;
      const e =
        name === undefined
          ? undefined
          : (ends.get({ job: jobId, name }) as { first: number | null; last: number | null });
      out.set(jobId, {
        step: r.last,
        totalSteps: total,
        etaMs,
        headline:
          name === undefined || !e || e.last === null
            ? null
            : { name, first: e.first, last: e.last },
      });
    }
    return out;
  }

  /** Steps of a job that have samples, ascending. */
  sampleSteps(jobId: string): number[] {
    return (
      this.db
        .prepare('SELECT DISTINCT step FROM ops_job_samples WHERE job_id = ? ORDER BY step')
        .all(jobId) as { step: number }[]
    ).map((r) => r.step);
  }

  /**
   * A job's samples: of one step, or (with `key` and no step) of one prompt across every step;
   * `minScore`/`maxScore` bound the score. Ordered by step, then as logged.
   */
  samples(
    jobId: string,
    q: { step?: number; key?: string; minScore?: number; maxScore?: number; limit?: number } = {},
  ): StoredSample[] {
    const where = ['job_id = ?'];
    const args: (string | number)[] = [jobId];
    if (q.step !== undefined) {
      where.push('step = ?');
      args.push(q.step);
    }
    if (q.key !== undefined) {
      where.push('sample_key = ?');
      args.push(q.key);
    }
    if (q.minScore !== undefined) {
      where.push('score >= ?');
      args.push(q.minScore);
    }
    if (q.maxScore !== undefined) {
      where.push('score <= ?');
      args.push(q.maxScore);
    }
    const rows = this.db
      .prepare(
        `SELECT step, seq, data FROM ops_job_samples WHERE ${where.join(' AND ')} ORDER BY step, seq LIMIT ?`,
      )
      .all(...args, q.limit ?? 1000) as { step: number; seq: number; data: string }[];
    return rows.map((r) => ({ ...(JSON.parse(r.data) as JobSample), step: r.step, seq: r.seq }));
  }

  /** The most recent value of every metric of every job that is still running (for /metrics). */
  latestMetrics(
    jobIds: readonly string[],
  ): { jobId: string; name: string; step: number; value: number }[] {
    if (jobIds.length === 0) return [];
    return this.db
      .prepare(
        `SELECT m.job_id AS jobId, m.name AS name, m.step AS step, m.value AS value
         FROM ops_job_metrics m
         JOIN (SELECT job_id, name, MAX(step) AS step FROM ops_job_metrics
               WHERE job_id IN (${jobIds.map(() => '?').join(',')}) GROUP BY job_id, name) l
         ON m.job_id = l.job_id AND m.name = l.name AND m.step = l.step
         WHERE m.value IS NOT NULL`,
      )
      .all(...jobIds) as { jobId: string; name: string; step: number; value: number }[];
  }

  addEvent(kind: string, subject: string, message: string, time = Date.now()): ClusterEvent {
    const info = this.#insertEvent.run(time, kind, subject, message);
    return { id: Number(info.lastInsertRowid), time, kind, subject, message };
  }

  /** Events newest first; `subject` filters to one job/actor/node id. */
  listEvents(opts: { subject?: string; limit?: number } = {}): ClusterEvent[] {
    const where = opts.subject ? 'WHERE subject = ?' : '';
    const args: unknown[] = opts.subject ? [opts.subject] : [];
    return this.db
      .prepare(`SELECT * FROM ops_events ${where} ORDER BY id DESC LIMIT ?`)
      .all(...args, opts.limit ?? 200) as ClusterEvent[];
  }

  /** Records a log file (idempotent on the path). */
  addLogFile(file: LogFile): void {
    this.db
      .prepare(
        `INSERT OR REPLACE INTO ops_log_files (path, kind, job_id, actor_id, node_id, pid, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(file.path, file.kind, file.jobId, file.actorId, file.nodeId, file.pid, file.createdAt);
  }

  /** Log files of a job (driver first) or of an actor, oldest first. */
  findLogFiles(query: { jobId?: string; actorId?: string }): LogFile[] {
    const clauses: string[] = [];
    const args: string[] = [];
    if (query.jobId) {
      clauses.push('job_id = ?');
      args.push(query.jobId);
    }
    if (query.actorId) {
      clauses.push('actor_id = ?');
      args.push(query.actorId);
    }
    const where = clauses.length ? `WHERE ${clauses.join(' AND ')}` : '';
    const rows = this.db
      .prepare(
        `SELECT path, kind, job_id AS jobId, actor_id AS actorId, node_id AS nodeId, pid,
           created_at AS createdAt FROM ops_log_files ${where}
         ORDER BY kind = 'worker', created_at`,
      )
      .all(...args) as LogFile[];
    return rows;
  }

  close(): void {
    if (this.#ownsDb && this.db.open) this.db.close();
  }
}
