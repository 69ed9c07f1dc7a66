/**
 * `WANDB_MODE=offline` (or `dryrun`, the SDK's older name): a W&B run written to disk as the SDK
 * writes one, for `wandb sync` to upload later from a machine that can reach W&B. No API key, no
 * network. The run directory is `<WANDB_DIR or .>/wandb/offline-run-<YYYYMMDD_HHMMSS>-<run id>/`
 * with
 * - `run-<run id>.wandb`: the transaction log (`wandb-datastore.ts`) `wandb sync` reads: a header
 *   record, the run (id, entity, project, group, job type, name, host, start time, config), then
 *   per logged row a history record (`_step`, `_runtime`, `_timestamp` and every finite value) and
 *   a summary update, and at the end the exit record (exit code 0, or 1 for a failed run);
 * - `files/config.yaml` (`<key>: {value: …}`), `files/wandb-metadata.json`, and at the end
 *   `files/wandb-summary.json`, as the SDK leaves them beside the log;
 * - `../latest-run`, a link to the newest run directory, as the SDK keeps one.
 *
 * Every record is written when it is logged, so nothing is queued and a run that dies leaves
 * every row it logged. The message fields are those of `wandb/proto/wandb_internal.proto` in the
 * SDK 0.28.3.dev1 (wandb/wandb at b6e2950, 2026-08):
 *
 * | message | fields written |
 * | --- | --- |
 * | `Record` | `num` 1, `history` 2, `summary` 3, `config` 5 (unused: config rides on `run`), `run` 17, `exit` 18, `header` 21 |
 * | `RunRecord` | `run_id` 1, `entity` 2, `project` 3, `config` 4, `run_group` 6, `job_type` 7, `display_name` 8, `host` 13, `start_time` 17 (`google.protobuf.Timestamp`: `seconds` 1, `nanos` 2) |
 * | `HistoryRecord` | `item` 1 (`HistoryItem`: `key` 1, `value_json` 16), `step` 2 (`HistoryStep`: `num` 1) |
 * | `SummaryRecord` / `ConfigRecord` | `update` 1 (`SummaryItem` / `ConfigItem`: `key` 1, `value_json` 16) |
 * | `RunExitRecord` | `exit_code` 1, `runtime` 2 (seconds) |
 * | `HeaderRecord` | `version_info` 1 (`VersionInfo`: `producer` 1) |
 *
 * @module
 */
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { FlagError } from '../driver-flags.ts';
import { Message } from './protobuf.ts';
import type { Row, Tracker, TrackerRun } from './tracker.ts';
import { WandbDatastore } from './wandb-datastore.ts';
import { finiteValues, wandbConfig, wandbHistoryRow, wandbRunId } from './wandb-run.ts';

/** Where and under which names an offline run is written. */
export interface WandbOfflineTarget {
  /** The directory holding `wandb/` (`WANDB_DIR`). @default the working directory */
  root?: string;
  /** `--wandb-org`, else `WANDB_ENTITY`; left empty, `wandb sync` uses the key's default entity. */
  entity?: string;
  project: string;
  group?: string;
}

/** `Record` field numbers (wandb_internal.proto). */
const REC = { num: 1, history: 2, summary: 3, run: 17, exit: 18, header: 21 } as const;

/** `key` 1 and `value_json` 16: HistoryItem, SummaryItem and ConfigItem alike. */
function items(field: number, values: Readonly<Record<string, unknown>>, into: Message): Message {
  for (const [key, value] of Object.entries(values))
    into.bytes(field, new Message().bytes(1, key).bytes(16, JSON.stringify(value)));
  return into;
}

/** The SDK's directory time: local `YYYYMMDD_HHMMSS`. */
function timespec(d: Date): string {
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}_${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
}

/** `config.yaml` as the SDK writes it: each key with its `value` (JSON scalars are YAML). */
function configYaml(config: Readonly<Record<string, unknown>>): string {
  const key = (k: string) => (/^[A-Za-z_][\w.-]*$/.test(k) ? k : JSON.stringify(k));
  return Object.entries(config)
    .map(([k, v]) => `${key(k)}:\n  value: ${JSON.stringify(v)}\n`)
    .join('');
}

/** What {@link writeWandbRun} needs besides the target: the run's id and start, and its kind. */
export interface WandbRunDirOptions {
  id: string;
  /** Unix milliseconds. */
  startedMs: number;
  /** `offline-run` (nothing is sent) or `run` (the local copy of an online run, as the SDK keeps). */
  mode: 'offline-run' | 'run';
}

/** A run directory being written. */
export interface WandbRunDir {
  /** The directory `wandb sync` takes. */
  readonly dir: string;
  /** Writes one row (history and summary records) at once. */
  log(row: Row): void;
  /** Writes the exit record and `files/wandb-summary.json`. */
  close(outcome: 'finished' | 'failed'): void;
}

/**
 * Writes a W&B run directory for `wandb sync`. A directory that cannot be made fails at once (as
 * a bad flag would); a later write error warns once and the run goes on.
 */
export function writeWandbRun(
  t: WandbOfflineTarget,
  run: TrackerRun,
  o: WandbRunDirOptions,
): WandbRunDir {
  const warn = run.warn ?? ((l: string) => process.stderr.write(`${l}\n`));
  const { id } = o;
  const started = new Date(o.startedMs);
  const wandbDir = resolve(t.root ?? '.', 'wandb');
  const name = `${o.mode}-${timespec(started)}-${id}`;
  const dir = join(wandbDir, name);
  const config = wandbConfig(run.settings);
  const summary: Record<string, number> = {};
  let log: WandbDatastore;
  try {
    mkdirSync(join(dir, 'files'), { recursive: true });
    log = new WandbDatastore(join(dir, `run-${id}.wandb`));
  } catch (err) {
    throw new FlagError(
      '--use-wandb',
      `--use-wandb: cannot write a run directory under ${wandbDir} (${(err as Error).message}); set WANDB_DIR`,
    );
  }
  let num = 0;
  let broken = false;
  const write = (field: number, body: Message): void => {
    if (broken) return;
    try {
      log.append(new Message().int(REC.num, ++num).bytes(field, body).end());
    } catch (err) {
      broken = true;
      warn(`wandb: cannot write ${dir} (${(err as Error).message}); the run goes on without it`);
    }
  };

  write(REC.header, new Message().bytes(1, new Message().bytes(1, 'rtjob')));
  write(REC.run, runRecord(t, run, id, started, config));
  writeFileSync(join(dir, 'files', 'config.yaml'), configYaml(config));
  writeFileSync(join(dir, 'files', 'wandb-metadata.json'), metadataJson(run, started));
  try {
    // As the SDK: `wandb/latest-run` names the newest run; another run may have just made it.
    rmSync(join(wandbDir, 'latest-run'), { force: true });
    symlinkSync(name, join(wandbDir, 'latest-run'));
  } catch {
    // Only a convenience: the run directory is what `wandb sync` reads.
  }

  let closed = false;
  return {
    dir,
    log(row) {
      if (closed) return;
      const history = items(1, wandbHistoryRow(row, o.startedMs), new Message());
      if (row.step !== 0) history.bytes(2, new Message().int(1, row.step));
      write(REC.history, history);
      const update = finiteValues(row.values);
      Object.assign(summary, update);
      write(REC.summary, items(1, update, new Message()));
    },
    close(outcome) {
      if (closed) return;
      closed = true;
      const exit = new Message();
      if (outcome === 'failed') exit.int(1, 1);
      const runtime = Math.floor((Date.now() - o.startedMs) / 1000);
      if (runtime > 0) exit.int(2, runtime);
      write(REC.exit, exit);
      try {
        log.close();
        writeFileSync(join(dir, 'files', 'wandb-summary.json'), `${JSON.stringify(summary)}\n`);
      } catch (err) {
        warn(`wandb: cannot finish ${dir} (${(err as Error).message})`);
      }
    },
  };
}

/** `RunRecord`: id, entity, project, config, group, job type, name, host, start time. */
function runRecord(
  t: WandbOfflineTarget,
  run: TrackerRun,
  id: string,
  started: Date,
  config: Readonly<Record<string, unknown>>,
): Message {
  const ms = started.getTime();
  const r = new Message().bytes(1, id);
  if (t.entity) r.bytes(2, t.entity);
  r.bytes(3, t.project).bytes(4, items(1, config, new Message()));
  if (t.group) r.bytes(6, t.group);
  return r
    .bytes(7, run.program)
    .bytes(8, run.name)
    .bytes(13, hostname())
    .bytes(17, new Message().int(1, Math.floor(ms / 1000)).int(2, (ms % 1000) * 1_000_000));
}

/** `files/wandb-metadata.json`: what ran, where and when. */
function metadataJson(run: TrackerRun, started: Date): string {
  const meta = {
    program: run.program,
    args: process.argv.slice(2),
    host: hostname(),
    startedAt: started.toISOString(),
    root: process.cwd(),
    executable: process.execPath,
  };
  return `${JSON.stringify(meta, null, 2)}\n`;
}

/** `WANDB_MODE=offline`: a run written for `wandb sync`, and nothing sent. */
export function openWandbOffline(t: WandbOfflineTarget, run: TrackerRun): Tracker {
  const local = writeWandbRun(t, run, {
    id: wandbRunId(),
    startedMs: Date.now(),
    mode: 'offline-run',
  });
  const where = `${local.dir} (offline; upload it with: wandb sync ${local.dir})`;
  return {
    kind: 'wandb',
    where: () => where,
    log(step, values) {
      local.log({ step, time: Date.now(), values: { ...values } });
    },
    close(outcome) {
      local.close(outcome);
      return Promise.resolve();
    },
  };
}
