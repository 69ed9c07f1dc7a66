/**
 * Every environment variable rtjob reads, with its parser and what it means, in one table.
 * Code reads them only through {@link readEnv}, so a value is parsed one way everywhere and a bad
 * one fails with a one-line error naming the variable. `test/conventions/env.test.ts` fails when
 * a `process.env.RTJOB_*`/`ASYNC_*` read appears outside this module, when code names a variable
 * this table lacks, or when the table in `runtime/README.md` and this one disagree.
 *
 * Variables marked `internal` are set by rtjob for the processes it starts (the job supervisor
 * for drivers, the node agent for workers); a user sets the others.
 *
 * @module
 */
import { InvalidArgumentError } from './errors.ts';

/** One variable: how its text becomes a value, and what it is for. */
export interface EnvVar<T> {
  /** Parses the raw text (never empty: an empty variable counts as unset). */
  readonly parse: (raw: string, name: string) => T;
  /** One line for the README table. */
  readonly doc: string;
  /** Set by rtjob for processes it starts, not by users. */
  readonly internal?: true;
}

const bad = (name: string, want: string, raw: string): InvalidArgumentError =>
  new InvalidArgumentError(`${name}: expected ${want}, got '${raw}'`);

/** The text as it is. */
const text = (raw: string): string => raw;

/** An integer >= `min`. */
const int =
  (min: number) =>
  (raw: string, name: string): number => {
    const v = raw.trim();
    if (!/^-?\d+$/.test(v) || Number(v) < min) throw bad(name, `an integer >= ${min}`, raw);
    return Number(v);
  };

/** `1`/`true`/`yes` or `0`/`false`/`no`. */
const flag = (raw: string, name: string): boolean => {
  if (/^(1|true|yes)$/i.test(raw.trim())) return true;
  if (/^(0|false|no)$/i.test(raw.trim())) return false;
  throw bad(name, '1 or 0', raw);
};

/** One of `choices`. */
const oneOf =
  <const C extends readonly string[]>(...choices: C) =>
  (raw: string, name: string): C[number] => {
    const v = raw.trim();
    if (!choices.includes(v)) throw bad(name, `one of ${choices.join(', ')}`, raw);
    return v as C[number];
  };

/** A JSON object of strings (an environment). */
const envJson = (raw: string, name: string): Record<string, string> => {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    throw bad(name, 'a JSON object of strings', raw);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    throw bad(name, 'a JSON object of strings', raw);
  }
  for (const x of Object.values(v)) {
    if (typeof x !== 'string') throw bad(name, 'a JSON object of strings', raw);
  }
  return v as Record<string, string>;
};

/** The TF.js backends `RTJOB_TF_BACKEND` may name (`model/backend.ts` starts them). */
export const tfBackendNames = ['torch', 'webgpu', 'wasm', 'cpu'] as const;

const v = <T>(parse: EnvVar<T>['parse'], doc: string, internal?: true): EnvVar<T> =>
  internal ? { parse, doc, internal } : { parse, doc };

/** The table: every variable rtjob reads. */
export const envVars = {
  RTJOB_HOME: v(text, 'where `cluster.json` lives (default `~/.rtjob`)'),
  RTJOB_ADDRESS: v(
    text,
    'head WebSocket address (`host:port`) `init()` connects to; set for job drivers',
  ),
  RTJOB_TOKEN: v(text, 'cluster token for `init()`, the CLI and node agents that join'),
  RTJOB_HTTP_ADDRESS: v(
    text,
    "head's HTTP API (`host:port` or URL) for the CLI and `metrics`; set for job drivers",
  ),
  RTJOB_JOB_ID: v(text, 'the job this driver or worker belongs to', true),
  RTJOB_JOB_ENV: v(envJson, 'JSON env given to every actor the driver creates', true),
  RTJOB_AUTO_RESUME: v(
    flag,
    "a job's driver resumes from its latest checkpoint when it has one (`rtjob submit --auto-resume`)",
    true,
  ),
  RTJOB_HEAD_RECONNECT_MS: v(
    int(0),
    'how long a driver or worker waits for a restarted head (ms; 0 gives up at once)',
    true,
  ),
  RTJOB_NODE_TIMEOUT_MS: v(
    int(1),
    "the daemon head's node heartbeat timeout (ms); tests shorten it",
  ),
  RTJOB_LOG_LEVEL: v(
    oneOf('debug', 'info', 'warn', 'error'),
    'runtime log level on stderr (default `warn`)',
  ),
  RTJOB_WORKER_LOADER: v(
    oneOf('cached', 'tsx'),
    'how workers load TypeScript: `cached` (default) or `tsx`',
  ),
  RTJOB_TS_CACHE_DIR: v(
    text,
    "workers' TypeScript transform cache (default `$TMPDIR/rtjob-ts-cache-<uid>`)",
  ),
  RTJOB_TF_BACKEND: v(
    oneOf(...tfBackendNames),
    'TF.js backend for every process of a job: `torch`, `webgpu`, `wasm` or `cpu` (default: torch where libtorch has CUDA and a GPU is visible, else wasm)',
  ),
  RTJOB_LIBTORCH: v(
    text,
    'a libtorch directory (with `include/` and `lib/`) for the `torch` backend, before python3 and Debian',
  ),
  RTJOB_TORCH_DEVICE: v(
    text,
    '`torch` backend device (`cpu`, `cuda`, `cuda:1`; default cuda when present)',
  ),
  RTJOB_TORCH_PRECISION: v(
    oneOf('fp32', 'tf32', 'bf16'),
    '`torch` backend matmul precision on CUDA (default `tf32`; `bf16`: matmuls and attention in bf16)',
  ),
  RTJOB_QUIET_BACKEND: v(flag, '`1`: do not print which TF.js backend started'),
  RTJOB_DEBUG: v(flag, '`1`: the CLI prints stack traces with its errors (as `--verbose` does)'),
  RTJOB_WORKING_DIR: v(text, "the job's working dir; workers run in it", true),
  RTJOB_PACKAGE: v(text, "hash of the job's working-dir package, for nodes to fetch it", true),
  RTJOB_SUBMITTER_MODULES: v(
    text,
    "the submitter's `node_modules` for an uploaded working dir: linked on its machine",
    true,
  ),
  RTJOB_WARM: v(flag, '`1`: a pre-booted worker waiting for its actor', true),
  RTJOB_ACTOR_ID: v(text, "the worker's actor", true),
  RTJOB_INCARNATION: v(int(0), "the worker's restart count", true),
  RTJOB_NODE_ID: v(text, "the worker's node", true),
  RTJOB_SESSION_DIR: v(text, "the head's session dir (logs, SQLite, packages)", true),
  RTJOB_HEAD_ADDRESS: v(text, 'head WebSocket address a worker connects to', true),
  RTJOB_WORKER_HOST: v(text, "interface a worker's own endpoint binds to", true),
  RTJOB_OBJECT_SHM: v(flag, '`0`: objects never go through `/dev/shm` between local processes'),
  RTJOB_OBJECT_MMAP: v(
    flag,
    '`0`: shared-memory objects are read into a buffer instead of mapped (no native addon is built)',
  ),
  RTJOB_OBJECT_STORE_MEMORY: v(
    int(0),
    "bytes of large values a process's object store keeps in memory before it spills to disk (default 30% of the machine's memory)",
  ),
  RTJOB_OBJECT_SPILL_DIR: v(
    text,
    'where object stores spill (default `$TMPDIR/rtjob-spill-<uid>`)',
  ),
  RTJOB_SERVE_API_KEY: v(text, 'API key `rtjob serve` requires of its clients (or `--api-key`)'),
  RTJOB_REMOTE_RM_API_KEY: v(
    text,
    'key `train_ppo --remote-rm-url` sends as `Authorization: Bearer` (the one `rtjob serve --reward-model` printed)',
  ),
  ASYNC_NUM_TASKS: v(int(1), 'agent episodes at once per engine (`--async-num-tasks`)'),
  ASYNC_QUEUE_SIZE: v(int(1), 'batches waiting between rollout and trainer (`--async-queue-size`)'),
} as const satisfies Record<string, EnvVar<unknown>>;

/** The name of a variable rtjob reads. */
export type EnvName = keyof typeof envVars;

/** The parsed type of variable `K`. */
export type EnvValue<K extends EnvName> = ReturnType<(typeof envVars)[K]['parse']>;

/**
 * The parsed value of `name`, or undefined when it is unset or empty. Throws
 * `InvalidArgumentError` (`NAME: expected …, got '…'`) for a value that does not parse.
 *
 * @param source where to read; the process environment unless given (a job's env, a test's)
 * @example
 * const tasks = readEnv('ASYNC_NUM_TASKS') ?? 128;
 */
export function readEnv<K extends EnvName>(
  name: K,
  source: Readonly<Record<string, string | undefined>> = process.env,
): EnvValue<K> | undefined {
  const raw = source[name];
  if (raw === undefined || raw === '') return undefined;
  return envVars[name].parse(raw, name) as EnvValue<K>;
}

/** True when `name` is a variable rtjob reads. */
export function isEnvName(name: string): name is EnvName {
  return Object.hasOwn(envVars, name);
}
