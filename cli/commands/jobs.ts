/**
 * `rtjob submit`, `list`, `logs`, `stop-job`, `delete-job`, `metrics`: jobs on a cluster.
 *
 * Over 600 lines on purpose: one command group whose commands share the endpoint lookup, the
 * working-dir packaging and the env-forwarding table of `submit`; each command is one function.
 *
 * @module
 */
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline/promises';

import {
  defaultMaxPackageBytes,
  duration,
  failureReason,
  headlineText,
  isLoopback,
  type MetricsTable,
  ownModuleNodeFlags,
  PackageTooLargeError,
  packDir,
  type QueryOf,
  rtjobHome,
  type SampleView,
  startClusterHead,
  stopAdvice,
  traceLines,
  tsxImport,
} from '../../ops/index.ts';
import { isRtjobError } from '../../runtime/index.ts';
import {
  CliError,
  type Endpoint,
  findEndpoint,
  headApi,
  openReadTarget,
  requireEndpoint,
  tailJobLogs,
  type TokenOptions,
} from '../client.ts';
import { localTime, parseEnvPairs, table } from '../format.ts';
import { builtinEntrypoints } from '../entrypoints.ts';

/**
 * Variables of the caller's environment that describe this machine or shell, not the job; every
 * other variable set for `rtjob submit` (ASYNC_NUM_TASKS=64 …) reaches the driver and workers.
 */
const machineLocal = new Set([
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'SHELL',
  'PWD',
  'OLDPWD',
  'SHLVL',
  '_',
  'TERM',
  'TERM_PROGRAM',
  'TERM_PROGRAM_VERSION',
  'COLORTERM',
  'HOSTNAME',
  'HOSTTYPE',
  'LANG',
  'LANGUAGE',
  'MAIL',
  'TMPDIR',
  'TEMP',
  'TMP',
  'DISPLAY',
  'EDITOR',
  'VISUAL',
  'PAGER',
  'LS_COLORS',
  'LESSOPEN',
  'LESSCLOSE',
  'NODE_PATH',
  'INIT_CWD',
  'NO_COLOR',
  'FORCE_COLOR',
  'OSTYPE',
  'MACHTYPE',
  'WSL_DISTRO_NAME',
  'RTJOB_ADDRESS',
  'RTJOB_TOKEN',
  'RTJOB_HTTP_ADDRESS',
  'RTJOB_JOB_ID',
  'RTJOB_JOB_ENV',
  'RTJOB_HOME',
]);
const machineLocalPrefixes = [
  'LC_',
  'XDG_',
  'SSH_',
  'npm_',
  'GPG_',
  'DBUS_',
  'WINDOWID',
  'KONSOLE_',
  'VSCODE_',
  'ITERM_',
  'TMUX',
  'STY',
  'GIO_',
  'GNOME_',
  'DESKTOP_',
  'SESSION_MANAGER',
  'SUDO_',
];

/** The caller's variables that a job inherits (see {@link machineLocal}). */
export function forwardedEnv(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined || machineLocal.has(k) || machineLocalPrefixes.some((p) => k.startsWith(p)))
      continue;
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) continue;
    out[k] = v;
  }
  return out;
}

/** Inherited variables worth showing with the job; the rest are forwarded but only counted. */
const shownEnv = /^(ASYNC_|RTJOB_|OPENRLHF_)|^(CUDA_VISIBLE_DEVICES|NODE_OPTIONS)$/;

/**
 * Splits what a job gets into the env shown on its page (`--env` pairs and job-relevant inherited
 * variables) and the rest of the caller's env (forwarded to the driver and workers, not shown).
 */
export function jobEnv(
  pairs: Record<string, string>,
  inherited: Record<string, string>,
): { env: Record<string, string>; inheritedEnv: Record<string, string> } {
  const env: Record<string, string> = {};
  const rest: Record<string, string> = {};
  for (const [k, v] of Object.entries(inherited)) (shownEnv.test(k) ? env : rest)[k] = v;
  for (const k of Object.keys(pairs)) delete rest[k];
  return { env: { ...env, ...pairs }, inheritedEnv: rest };
}

/** Options of `rtjob submit`. */
export interface SubmitOptions extends TokenOptions {
  address?: string;
  workingDir?: string;
  env: string[];
  jobId?: string;
  wait: boolean;
  entrypointNumCpus?: string;
  entrypointNumGpus?: string;
  inheritEnv: boolean;
  metadata?: string;
  /** `--auto-resume`: the driver resumes from its latest checkpoint when it has one. */
  autoResume?: boolean;
}

async function uploadWorkingDir(ep: Endpoint, dir: string): Promise<string> {
  let packed;
  try {
    packed = packDir(dir, defaultMaxPackageBytes);
  } catch (err) {
    if (err instanceof PackageTooLargeError) throw new CliError(err.message, 2, err.code);
    throw new CliError(`cannot read --working-dir ${dir}: ${(err as Error).message}`, 2);
  }
  const api = headApi(ep);
  const params = { hash: packed.hash };
  const have = await api.call('GET /api/packages/:hash', { params }).catch(() => undefined);
  if (!have?.exists) {
    await api.call('PUT /api/packages/:hash', { params, body: packed.archive });
    process.stderr.write(
      `uploaded working dir ${dir} (${packed.files} files, ${packed.archive.length} bytes)\n`,
    );
  }
  return `pkg://${packed.hash}`;
}

/**
 * Parses train_ppo's flags here as its driver will, and checks its local paths (agent file,
 * `--pretrain`, datasets) and dataset keys against `cwd`, the directory the job will run in;
 * fails the way the driver would (exit 2).
 */
async function checkTrainPpoFlags(
  argv: string[],
  env: Record<string, string>,
  cwd: string,
  nodeGpus?: number[],
): Promise<void> {
  const { checkTrainPpoKeys, checkTrainPpoPaths, gpuProblem, parseTrainPpoFlags } = await import(
    '../../train/index.ts'
  );
  try {
    const all = { ...process.env, ...env };
    const o = parseTrainPpoFlags(argv, all);
    const gpus = nodeGpus && gpuProblem(o, nodeGpus);
    if (gpus) throw new CliError(gpus.message, 2, 'BAD_FLAG');
    checkTrainPpoPaths(o, cwd, all);
    await checkTrainPpoKeys(o, cwd);
  } catch (err) {
    if (isRtjobError(err, 'BAD_FLAG')) throw new CliError(`train_ppo: ${err.message}`, 2, err.code);
    throw err;
  }
}

/** `rtjob submit ... -- ENTRYPOINT...`; resolves to the process exit code. */
export async function submitCommand(entrypoint: string[], o: SubmitOptions): Promise<number> {
  if (entrypoint.length === 0)
    throw new CliError(
      'give the entrypoint after --, e.g. rtjob submit -- train_ppo --async-train',
      2,
    );
  // `submit -- train_ppo --help` asks for the driver's help, not for a job.
  const builtin = builtinEntrypoints[entrypoint[0]!];
  if (builtin && entrypoint.slice(1).some((a) => a === '--help' || a === '-h')) {
    const r = spawnSync(process.execPath, [...ownModuleNodeFlags(tsxImport), builtin, '--help'], {
      stdio: 'inherit',
    });
    return r.status ?? 1;
  }
  let env: ReturnType<typeof jobEnv>;
  try {
    const pairs = o.autoResume ? [...o.env, 'RTJOB_AUTO_RESUME=1'] : o.env;
    env = jobEnv(parseEnvPairs(pairs), o.inheritEnv ? forwardedEnv() : {});
  } catch (err) {
    throw new CliError((err as Error).message, 2);
  }
  const num = (name: string, v?: string) => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0)
      throw new CliError(`${name} must be a non-negative number`, 2);
    return n;
  };
  const request = {
    entrypoint,
    jobId: o.jobId,
    ...env,
    metadata: o.metadata ? parseMetadata(o.metadata) : undefined,
    entrypointNumCpus: num('--entrypoint-num-cpus', o.entrypointNumCpus),
    entrypointNumGpus: num('--entrypoint-num-gpus', o.entrypointNumGpus),
  };

  let ep = findEndpoint(o);
  let ephemeral: Awaited<ReturnType<typeof startClusterHead>> | undefined;
  let dropSession = false;
  // A typo or a missing file should not cost a private cluster (and a session in the run
  // history) to report. The job runs in the working dir, else here when the head is local.
  const localHead = !ep || isLoopback(new URL(ep.url).hostname);
  if (entrypoint[0] === 'train_ppo' && (localHead || o.workingDir))
    await checkTrainPpoFlags(
      entrypoint.slice(1),
      request.env,
      resolve(o.workingDir ?? process.cwd()),
      // The private cluster started below offers no GPUs; a running head is asked by the driver.
      ep ? undefined : [0],
    );
  if (!ep) {
    // No cluster: run this one job on a private local cluster and stop it afterwards.
    const sessionDir = join(rtjobHome(), 'runs', `${Date.now()}-${process.pid}`);
    mkdirSync(sessionDir, { recursive: true, mode: 0o700 });
    ephemeral = await startClusterHead({
      sessionDir,
      port: 0,
      dashboardPort: 0,
      stopGraceMs: 3000,
      builtins: builtinEntrypoints,
    });
    ep = { url: ephemeral.dashboardUrl, token: ephemeral.token };
    process.stderr.write(
      `no cluster running: started a local one for this job (session ${sessionDir})\n`,
    );
  }
  try {
    const workingDir = o.workingDir ? await uploadWorkingDir(ep, o.workingDir) : undefined;
    const local = isLoopback(new URL(ep.url).hostname);
    // The upload leaves node_modules out; a machine that has this one links it (package-deps.ts).
    const nodeModules = o.workingDir ? resolve(o.workingDir, 'node_modules') : undefined;
    if (nodeModules && existsSync(nodeModules))
      request.env = { ...request.env, RTJOB_SUBMITTER_MODULES: nodeModules };
    const { job } = await headApi(ep).call('POST /api/jobs', {
      body: { ...request, workingDir, ...(workingDir || !local ? {} : { cwd: process.cwd() }) },
    });
    if (!o.wait && !ephemeral) {
      console.log(job.jobId);
      process.stderr.write(
        `submitted ${job.jobId}; follow it with: rtjob logs -f ${job.jobId}\ndashboard: ${ep.url}/#/jobs/${encodeURIComponent(job.jobId)} (login link: rtjob dashboard)\n`,
      );
      return 0;
    }
    if (!o.wait)
      process.stderr.write(
        '--no-wait: no cluster is running, and the private one started for this job lives only as long as this command, so it waits (`rtjob start --head` first to submit and return)\n',
      );
    process.stderr.write(
      `job ${job.jobId} submitted; streaming its logs (Ctrl-C to stop${ephemeral ? '' : ' or detach'})\n`,
    );
    const jobPath = `#/jobs/${encodeURIComponent(job.jobId)}`;
    if (ephemeral) {
      // The login link sets the cookie and lands on the job's page (the fragment survives the redirect).
      process.stderr.write(
        `dashboard (while the job runs): ${ep.url}/login?token=${encodeURIComponent(ep.token)}${jobPath}\n`,
      );
    } else {
      process.stderr.write(`dashboard: ${ep.url}/${jobPath} (login link: rtjob dashboard)\n`);
    }
    const code = await followToEnd(ep, job.jobId, !ephemeral);
    if (ephemeral) {
      const kept = await keepMetrics(ep, job.jobId, ephemeral.sessionDir);
      // A training job that failed before its first step leaves nothing worth a run in the
      // history (its error was streamed above); any other job keeps its logs.
      dropSession = !kept && code !== 0 && builtin !== undefined;
      if (!dropSession)
        process.stderr.write(
          `the run is kept in ${ephemeral.sessionDir}: rtjob samples ${job.jobId}, rtjob metrics ${job.jobId}, rtjob dashboard (serves it read-only)\n`,
        );
    }
    return code;
  } finally {
    await ephemeral?.close({ stopJobs: true });
    if (ephemeral && dropSession) rmSync(ephemeral.sessionDir, { recursive: true, force: true });
  }
}

/**
 * A local cluster started for one job goes away with it, and with it `rtjob metrics`: the job's
 * metrics are written beside its session as CSV first (no file when the job logged none).
 * Returns whether it logged any (or the metrics could not be read).
 */
async function keepMetrics(ep: Endpoint, jobId: string, sessionDir: string): Promise<boolean> {
  try {
    const csv = await metricsCsv(ep, jobId);
    if (!hasRows(csv)) return false;
    const file = join(sessionDir, `${jobId}.metrics.csv`);
    writeFileSync(file, csv);
    process.stderr.write(
      `metrics of ${jobId}: ${file} (curves: rtjob metrics ${jobId} --plot curve.svg)\n`,
    );
    return true;
  } catch (err) {
    process.stderr.write(`could not keep the metrics of ${jobId}: ${(err as Error).message}\n`);
    return true; // the session stays, for what it holds
  }
}

/** Streams logs until the job ends; Ctrl-C asks whether to stop it. Returns the exit code. */
async function followToEnd(ep: Endpoint, jobId: string, canDetach: boolean): Promise<number> {
  const abort = new AbortController();
  let detached = false;
  const onSigint = async () => {
    process.off('SIGINT', onSigint);
    let stop = !canDetach;
    if (canDetach && process.stdin.isTTY) {
      const rl = createInterface({ input: process.stdin, output: process.stderr });
      // A second Ctrl-C at the prompt means "stop it", not a crash that leaves the job running.
      const again = new Promise<string>((resolve) => rl.once('SIGINT', () => resolve('y')));
      let answer: string;
      try {
        answer = await Promise.race([rl.question(`\nstop job ${jobId}? [y/N] `), again]);
      } catch {
        answer = 'y';
      } finally {
        rl.close();
      }
      stop = /^y(es)?$/i.test(answer.trim());
    }
    if (stop) {
      process.stderr.write(`stopping ${jobId}... (Ctrl-C again leaves without waiting)\n`);
      process.once('SIGINT', () => {
        process.stderr.write(`left; ${jobId} is being stopped (rtjob list shows when it is)\n`);
        process.exit(130);
      });
      await headApi(ep)
        .call('POST /api/jobs/:jobId/stop', { params: { jobId } })
        .catch(() => undefined);
    } else {
      detached = true;
      process.stderr.write(`detached; ${jobId} keeps running (rtjob logs -f ${jobId})\n`);
      abort.abort();
    }
  };
  process.on('SIGINT', onSigint);
  try {
    await tailJobLogs(ep, jobId, (s) => process.stdout.write(s), abort.signal);
  } finally {
    process.off('SIGINT', onSigint);
  }
  if (detached) return 130;
  const job = await headApi(ep).call('GET /api/jobs/:jobId', { params: { jobId } });
  const took = job.startedAt && job.endedAt ? ` in ${duration(job.endedAt - job.startedAt)}` : '';
  if (job.status === 'SUCCEEDED') {
    process.stderr.write(`job ${jobId} SUCCEEDED${took}\n`);
    return 0;
  }
  process.stderr.write(
    `job ${jobId} ${job.status}${took}${job.exitCode !== null ? ` (exit code ${job.exitCode})` : ''}\n`,
  );
  // Its last output lines were just streamed above: the message's first line says the rest.
  if (job.status === 'FAILED' && job.message)
    process.stderr.write(`${job.message.split('\n')[0]!.replace(/; last output:$/, '')}\n`);
  return 1;
}

/** `rtjob list [--json]`. */
export async function listCommand(o: ReadOptions & { json?: boolean }): Promise<void> {
  await reading(o, (ep) => listJobs(ep, o));
}

/** Options of the commands that read a head or a finished session. */
export interface ReadOptions extends TokenOptions {
  address?: string;
  /** A finished session dir to read from disk. */
  session?: string;
}

/** Runs `fn` against the running cluster or a finished session (see {@link openReadTarget}). */
export async function reading<T>(o: ReadOptions, fn: (ep: Endpoint) => Promise<T>): Promise<T> {
  const target = await openReadTarget(o);
  try {
    return await fn(target.ep);
  } finally {
    await target.close();
  }
}

async function listJobs(ep: Endpoint, o: { json?: boolean }): Promise<void> {
  const { jobs } = await headApi(ep).call('GET /api/jobs');
  if (o.json) {
    console.log(JSON.stringify(jobs, null, 2));
    return;
  }
  if (jobs.length === 0) {
    console.log('no jobs');
    return;
  }
  const now = Date.now();
  const cut = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
  console.log(
    table(
      [
        'JOB',
        'STATUS',
        'SUBMITTED',
        'DURATION',
        'PROGRESS',
        'HEADLINE',
        'ENTRYPOINT / WHY IT FAILED',
      ],
      jobs.map((j) => {
        const p = j.progress;
        const h = p?.headline;
        // As the dashboard's jobs list: a failed job shows the line of its message that says why.
        const why = failureReason(j.message);
        return [
          j.jobId,
          j.status,
          localTime(j.submittedAt),
          j.startedAt ? duration((j.endedAt ?? now) - j.startedAt) : '-',
          p && p.step !== null ? `${p.step}${p.totalSteps ? `/${p.totalSteps}` : ''}` : '-',
          h && h.last !== null ? headlineText({ ...h, last: h.last }) : '-',
          cut(j.status === 'FAILED' && why ? why : j.entrypoint.join(' '), 70),
        ];
      }),
    ),
  );
}

/**
 * `--metadata`: a JSON object of string labels (Ray's `--metadata-json`), refused in plain words
 * with an example when it is not one (G24).
 */
export function parseMetadata(text: string): Record<string, string> {
  const example = `e.g. --metadata '{"team": "rl", "run": "7"}'`;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new CliError(`--metadata must be a JSON object of string labels, ${example}`, 2);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new CliError(`--metadata must be a JSON object of string labels, ${example}`, 2);
  const bad = Object.entries(value).find(([, v]) => typeof v !== 'string');
  if (bad)
    throw new CliError(
      `--metadata: label '${bad[0]}' is ${JSON.stringify(bad[1])}; labels are strings, ${example}`,
      2,
    );
  return value as Record<string, string>;
}

/** `rtjob logs JOB [-f] [--actor NAME|ID]`. */
export async function logsCommand(
  jobId: string,
  o: ReadOptions & { follow?: boolean; actor?: string },
): Promise<void> {
  await reading(o, (ep) => showLogs(ep, jobId, o));
}

async function showLogs(
  ep: Endpoint,
  jobId: string,
  o: { follow?: boolean; actor?: string },
): Promise<void> {
  const api = headApi(ep);
  if (o.actor) {
    const page = await api.call('GET /api/jobs/:jobId/actors', {
      params: { jobId },
      query: { limit: 1000 },
    });
    const actorId = pickActor(page.rows, jobId, o.actor);
    let printed = false;
    // The cursor holds an offset per file: stdout and stderr of every incarnation of the actor.
    let cursor = '';
    let deadSeen = false;
    for (;;) {
      const r = await api.call('GET /api/actors/:actorId/logs', {
        params: { actorId },
        query: { cursor },
      });
      process.stdout.write(r.logs);
      printed ||= r.logs.length > 0;
      cursor = r.cursor;
      if (r.logs.length > 0) continue;
      if (!o.follow && !printed)
        process.stderr.write(`(empty log: actor ${o.actor} wrote nothing)\n`);
      // One more read after the actor is seen DEAD picks up its last, unterminated line.
      if (!o.follow || deadSeen) return;
      if (r.state === 'DEAD') {
        deadSeen = true;
        continue;
      }
      await new Promise((r2) => setTimeout(r2, 300));
    }
  }
  if (o.follow) {
    await api.call('GET /api/jobs/:jobId', { params: { jobId } });
    await tailJobLogs(ep, jobId, (s) => process.stdout.write(s));
    const job = await api.call('GET /api/jobs/:jobId', { params: { jobId } });
    const took = job.startedAt && job.endedAt ? ` in ${duration(job.endedAt - job.startedAt)}` : '';
    process.stderr.write(`job ${jobId} ${job.status}${took}\n`);
    return;
  }
  let offset = 0;
  for (;;) {
    const r = await api.call('GET /api/jobs/:jobId/logs', { params: { jobId }, query: { offset } });
    process.stdout.write(r.logs);
    if (offset === 0 && r.logs.length === 0) process.stderr.write(`(empty log: job ${jobId})\n`);
    if (r.nextOffset >= r.size || r.logs.length === 0) return;
    offset = r.nextOffset;
  }
}

/**
 * The id of the actor `--actor` names among a job's actors: its id, its name, or its name without
 * the job's prefix as the dashboard shows it (`trainer` for `JOB/trainer`), as Ray's state API
 * filters by name; the newest when several incarnations share the name. A name that is not there
 * fails with the job's actors listed.
 */
export function pickActor(
  actors: readonly { actorId: string; name: string | null; startedAt: number | null }[],
  jobId: string,
  wanted: string,
): string {
  const shown = (name: string | null): string | null =>
    name?.startsWith(`${jobId}/`) ? name.slice(jobId.length + 1) : name;
  const hits = actors.filter(
    (a) => a.actorId === wanted || a.name === wanted || shown(a.name) === wanted,
  );
  if (hits.length === 0) {
    const names = actors.map((a) => shown(a.name) ?? a.actorId);
    throw new CliError(
      names.length
        ? `job ${jobId} has no actor '${wanted}'; its actors: ${[...new Set(names)].sort().join(', ')}`
        : `job ${jobId} has no actors (its driver's own output is \`rtjob logs ${jobId}\`)`,
      2,
    );
  }
  return hits.reduce((a, b) => ((b.startedAt ?? 0) > (a.startedAt ?? 0) ? b : a)).actorId;
}

/** `rtjob stop-job JOB`. */
export async function stopJobCommand(
  jobId: string,
  o: { address?: string } & TokenOptions,
): Promise<void> {
  const ep = requireEndpoint(o);
  const api = headApi(ep);
  const r = await api.call('POST /api/jobs/:jobId/stop', { params: { jobId } });
  console.log(
    r.stopped ? `job ${jobId} ${r.job.status}` : `job ${jobId} had already ended (${r.job.status})`,
  );
  if (!r.stopped) return;
  // What the stopped run leaves: its checkpoint and the command that resumes from it.
  const job = await api.call('GET /api/jobs/:jobId', { params: { jobId } });
  for (const line of stopAdvice(job)) console.log(line);
}

/** `rtjob delete-job JOB`. */
export async function deleteJobCommand(
  jobId: string,
  o: { address?: string } & TokenOptions,
): Promise<void> {
  const ep = requireEndpoint(o);
  await headApi(ep).call('DELETE /api/jobs/:jobId', { params: { jobId } });
  console.log(`deleted job ${jobId} (its log file is kept)`);
}

/** A job's metrics, a row per step, as CSV. */
function metricsCsv(ep: Endpoint, jobId: string): Promise<string> {
  return headApi(ep).call('GET /api/jobs/:jobId/metrics.csv', { params: { jobId } });
}

/** Whether a metrics CSV has a row under its header. */
function hasRows(csv: string): boolean {
  return csv.trim().includes('\n');
}

/** `rtjob metrics JOB [--csv] [--json]`. */
export async function metricsCommand(
  jobId: string,
  o: ReadOptions & {
    csv?: boolean;
    json?: boolean;
    last?: string;
    keys?: string;
    plot?: string;
  },
): Promise<void> {
  await reading(o, (ep) => showMetrics(ep, jobId, o));
}

/** Every metric row a job logged, all pages (the API pages long runs) under the first's columns. */
export async function jobMetrics(ep: Endpoint, jobId: string): Promise<MetricsTable> {
  const api = headApi(ep);
  const params = { jobId };
  // Later pages name a subset of the first's metrics.
  const t = await api.call('GET /api/jobs/:jobId/metrics', { params });
  for (let next = t.nextSinceStep; next !== null; ) {
    const page = await api.call('GET /api/jobs/:jobId/metrics', {
      params,
      query: { sinceStep: next },
    });
    const at = t.columns.map((c) => page.columns.indexOf(c));
    t.rows.push(...page.rows.map((r) => at.map((i) => (i < 0 ? null : (r[i] ?? null)))));
    next = page.rows.length === 0 ? null : page.nextSinceStep;
  }
  return t;
}

/** Columns a reader looks for first, in this order (when logged). */
const keyMetrics = [
  'step',
  'reward_mean',
  'eval_accuracy',
  'kl',
  'policy_loss',
  'value_loss',
  'response_length',
  'episodes_failed',
];

async function showMetrics(
  ep: Endpoint,
  jobId: string,
  o: { csv?: boolean; json?: boolean; last?: string; keys?: string; plot?: string },
): Promise<void> {
  if (o.csv) {
    process.stdout.write(await metricsCsv(ep, jobId));
    return;
  }
  if (o.plot) {
    const csv = await metricsCsv(ep, jobId);
    if (!hasRows(csv)) throw new CliError(`job ${jobId} logged no metrics`);
    // --keys names or prefixes (as for the table) add lines: `info/` draws every extraInfo mean.
    const cols = csv.slice(0, csv.indexOf('\n')).split(',');
    const extra = (o.keys?.split(',').filter(Boolean) ?? []).flatMap((k) =>
      cols.includes(k) ? [k] : cols.filter((c) => c.startsWith(k)),
    );
    const { writeCurves } = await import('../../train/index.ts');
    console.log(writeCurves(csv, o.plot, jobId, extra));
    return;
  }
  const t = await jobMetrics(ep, jobId);
  if (o.json) {
    console.log(JSON.stringify(t));
    return;
  }
  if (t.rows.length === 0) {
    console.log(`job ${jobId} has logged no metrics`);
    return;
  }
  const last = Number(o.last ?? 20);
  const fmt = (v: number | null | undefined) =>
    v === null || v === undefined ? '' : Number.isInteger(v) ? String(v) : v.toPrecision(5);
  const logged = t.columns.filter((c) => c !== 'time');
  // --keys: names or prefixes (`info/`); else the key metrics first, then as many as fit.
  const wanted = o.keys
    ?.split(',')
    .map((k) => k.trim())
    .filter(Boolean);
  let cols = wanted
    ? ['step', ...logged.filter((c) => c !== 'step' && wanted.some((k) => c.startsWith(k)))]
    : [
        ...keyMetrics.filter((c) => logged.includes(c)),
        ...logged.filter((c) => !keyMetrics.includes(c)),
      ];
  const rows = t.rows.slice(-last);
  let hidden = 0;
  if (!wanted) {
    const room = process.stdout.columns || 160;
    let width = 0;
    const fits = cols.filter((c) => {
      const i = t.columns.indexOf(c);
      width += Math.max(c.length, ...rows.map((r) => fmt(r[i]).length)) + 2;
      return width <= room || c === 'step';
    });
    hidden = cols.length - fits.length;
    cols = fits;
  }
  const idx = cols.map((c) => t.columns.indexOf(c));
  console.log(
    table(
      cols,
      rows.map((r) => idx.map((i) => fmt(r[i]))),
    ),
  );
  if (hidden > 0)
    console.log(
      `(${hidden} more metrics: --keys name,prefix/ picks columns, --csv or --json gives all)`,
    );
  if (t.rows.length > last) console.log(`(last ${last} of ${t.rows.length} steps; --csv for all)`);
}

/**
 * `rtjob samples JOB [--step N] [--prompt KEY] [--min-score R] [--max-score R] [--full] [--json]`
 * (`--min-reward`/`--max-reward`, train_ppo's word for its score, are accepted too).
 */
export async function samplesCommand(
  jobId: string,
  o: ReadOptions & {
    step?: string;
    prompt?: string;
    minScore?: string;
    maxScore?: string;
    minReward?: string;
    maxReward?: string;
    full?: boolean;
    json?: boolean;
  },
): Promise<void> {
  const num = (flag: string, v: string | undefined): number | undefined => {
    if (v === undefined) return undefined;
    if (!Number.isFinite(Number(v))) throw new CliError(`${flag} must be a number, got ${v}`, 2);
    return Number(v);
  };
  const query: NonNullable<QueryOf<'GET /api/jobs/:jobId/samples'>> = {
    step: num('--step', o.step),
    minScore: num('--min-score', o.minScore) ?? num('--min-reward', o.minReward),
    maxScore: num('--max-score', o.maxScore) ?? num('--max-reward', o.maxReward),
    key: o.prompt,
  };
  const [page, job] = await reading(o, (ep) =>
    Promise.all([
      headApi(ep).call('GET /api/jobs/:jobId/samples', { params: { jobId }, query }),
      headApi(ep).call('GET /api/jobs/:jobId', { params: { jobId } }),
    ]),
  );
  const scoreName = job.report.samples?.score ?? 'score';
  if (o.json) {
    console.log(JSON.stringify(page, null, 2));
    return;
  }
  if (page.steps.length === 0) {
    console.log(
      `job ${jobId} has kept no samples (train_ppo keeps --log-samples N per step, 16 by default)`,
    );
    return;
  }
  const range = `${page.steps[0]}–${page.steps.at(-1)}`;
  const what = o.prompt !== undefined ? `prompt ${o.prompt} over time` : `step ${page.step}`;
  console.log(
    `job ${jobId}, ${what}: ${page.samples.length} sample${page.samples.length === 1 ? '' : 's'} (steps with samples: ${range}; --step N, --prompt KEY)`,
  );
  const cut = (t: string) =>
    o.full || t.length <= 400 ? t : `${t.slice(0, 400)}… (--full for all ${t.length} characters)`;
  const indent = (t: string) => t.replace(/\n/g, '\n    ');
  for (const s of page.samples as SampleView[]) {
    const facts = [
      `step ${s.step}`,
      s.pick,
      s.score !== undefined ? `${scoreName} ${+s.score.toFixed(4)}` : undefined,
      s.key !== undefined ? `prompt #${s.key}` : undefined,
      s.versionMin !== undefined
        ? `version ${s.versionMin === s.versionMax ? s.versionMin : `${s.versionMin}–${s.versionMax}`}`
        : undefined,
      s.staleness ? `staleness ${s.staleness}` : undefined,
      s.stopReason ? `stop: ${s.stopReason}` : undefined,
      s.responseTokens !== undefined
        ? `${s.promptTokens} prompt + ${s.responseTokens} generated tokens`
        : undefined,
    ].filter(Boolean);
    console.log(`\n── ${facts.join(' · ')}`);
    if (s.prompt !== undefined) console.log(`  prompt: ${indent(cut(s.prompt))}`);
    if (s.label !== undefined) console.log(`  label: ${indent(cut(s.label))}`);
    for (const t of s.turns ?? []) {
      console.log(`  ${t.role}: ${indent(cut(t.text))}`);
      for (const c of t.toolCalls ?? []) console.log(`    → tool call ${c.name}(${c.arguments})`);
    }
    if (s.extraInfo && Object.keys(s.extraInfo).length) {
      console.log(
        `  extraInfo: ${Object.entries(s.extraInfo)
          .map(([k, v]) => `${k}=${String(v)}`)
          .join(' ')}`,
      );
    }
    if (s.error) console.log(`  error: ${indent(cut(s.error))}`);
    if (s.trace) {
      console.log(`  trace ${s.trace.traceIds.join(', ')}:`);
      for (const line of traceLines(s.trace)) console.log(`    ${line}`);
    }
  }
}
