/**
 * Experiment trackers of the drivers (`train_ppo`, `train_sft`): their flags, named as OpenRLHF
 * names them (`--use-tensorboard DIR`, `--use-wandb [KEY]`, `--wandb-project`, `--wandb-org`,
 * `--wandb-group`, `--wandb-run-name`) plus `--use-mlflow URI` and `--mlflow-experiment-name`
 * (and `train_ppo`'s `--otlp-endpoint`, whose row is in its flag table: the phases as spans),
 * and {@link openTrackers}, which opens the ones asked for. A driver sends each step's metrics
 * to them at the one place it logs its metrics, so every metric the head stores reaches every
 * tracker.
 *
 * @module
 */
import { FlagError, type FlagSpec, kebab } from '../driver-flags.ts';
import { mlflowUri, openMlflow } from './mlflow.ts';
import { openOtlp, otlpHeaders, otlpTracesUrl } from './otlp.ts';
import { openTensorBoard } from './tensorboard.ts';
import type { RunSetting, Tracker } from './tracker.ts';
import { openWandbOffline } from './wandb-offline.ts';
import { openWandb, wandbApiKey, wandbKeyHint } from './wandb.ts';

export type { RunSetting, Tracker } from './tracker.ts';

/** The tracker options of a driver. */
export interface TrackerOptions {
  /** TensorBoard log root; the run writes `<dir>/<run name>/events.out.tfevents.*`. */
  useTensorboard?: string | undefined;
  /** W&B API key (OpenRLHF's meaning), or `'true'` (the flag alone): `WANDB_API_KEY` or `~/.netrc`. */
  useWandb?: string | undefined;
  /** W&B entity (user or team). @default WANDB_ENTITY, else the key's default entity */
  wandbOrg?: string | undefined;
  /** W&B run group. */
  wandbGroup?: string | undefined;
  /** W&B project. @default WANDB_PROJECT, else `rtjob_<program>` */
  wandbProject?: string | undefined;
  /** Run name in every tracker. @default the job id, else `run-<date>-<time>` */
  wandbRunName?: string | undefined;
  /** MLflow tracking server URL, or `'true'` (the flag alone): `MLFLOW_TRACKING_URI`. */
  useMlflow?: string | undefined;
  /** MLflow experiment. @default MLFLOW_EXPERIMENT_NAME, else the W&B project's default */
  mlflowExperimentName?: string | undefined;
  /**
   * OTLP/HTTP receiver of the run's phase spans, or `'true'` (the flag alone):
   * `OTEL_EXPORTER_OTLP_ENDPOINT`. A `train_ppo` flag (its row is in `train/ppo/flag-table.ts`).
   */
  otlpEndpoint?: string | undefined;
}

/** The tracker flags, in the order `--help` lists them. */
export const trackerFlags: readonly FlagSpec<keyof TrackerOptions>[] = [
  {
    key: 'useTensorboard',
    kind: 'string',
    help: 'write TensorBoard event files (every metric per step, the flags as text) under DIR/<run name>',
  },
  {
    key: 'useWandb',
    kind: 'string',
    bare: 'true',
    secret: true,
    help: 'log to Weights & Biases; the value is the API key as in OpenRLHF, or give the flag alone to use WANDB_API_KEY (or ~/.netrc); host WANDB_BASE_URL; WANDB_MODE=offline (or no key) writes ./wandb/offline-run-* for wandb sync',
  },
  {
    key: 'wandbOrg',
    kind: 'string',
    help: "W&B entity (default WANDB_ENTITY, else the key's own)",
  },
  { key: 'wandbGroup', kind: 'string', help: 'W&B run group' },
  {
    key: 'wandbProject',
    kind: 'string',
    help: 'W&B project, also the default MLflow experiment (default WANDB_PROJECT, else rtjob_<program>)',
  },
  {
    key: 'wandbRunName',
    kind: 'string',
    help: 'run name in every tracker and the TensorBoard subdirectory (default the job id, else run-<date>-<time>)',
  },
  {
    key: 'useMlflow',
    kind: 'string',
    bare: 'true',
    help: 'log to an MLflow tracking server at this URL (the flag alone: MLFLOW_TRACKING_URI); auth MLFLOW_TRACKING_TOKEN or _USERNAME/_PASSWORD',
  },
  {
    key: 'mlflowExperimentName',
    kind: 'string',
    help: 'MLflow experiment (default MLFLOW_EXPERIMENT_NAME, else the W&B project default)',
  },
];

/** The trackers a run opened, as one. */
export interface Trackers {
  /** The open trackers (none when no flag asked for one). */
  readonly list: readonly Tracker[];
  /** Sends one step's values to every tracker; never throws, never waits. */
  log(step: number, values: Readonly<Record<string, number>>): void;
  /** Ends every tracker's run, waiting at most `timeoutMs` for each. */
  close(outcome: 'finished' | 'failed', timeoutMs?: number): Promise<void>;
}

/** What {@link openTrackers} needs besides the options. */
export interface OpenTrackersContext {
  /** `train_ppo` or `train_sft`. */
  program: string;
  /** The run's name when `--wandb-run-name` is not given. */
  defaultRunName: string;
  /** Every effective setting (secrets hidden). */
  settings: RunSetting[];
  /** Where `WANDB_*`, `MLFLOW_*` and `HOME` are read. */
  env: Readonly<Record<string, string | undefined>>;
  /** One warning line. @default stderr */
  warn?: (line: string) => void;
  /** Send interval of the network trackers. @default 2000 */
  flushIntervalMs?: number;
  /** The policy model and its engine, for the GenAI attributes of `--otlp-endpoint`'s spans. */
  genAi?: { model: string; engine: string };
}

/**
 * Opens every tracker the options ask for. A bad flag (an unwritable TensorBoard directory, no
 * W&B key, an MLflow URI that is not http) throws a `FlagError` before anything starts; a
 * service that cannot be reached only warns, once, and the run goes on.
 *
 * @example
 * const trackers = openTrackers(o, { program: 'train_ppo', defaultRunName: 'run-1', settings, env: process.env });
 * trackers.log(1, { reward_mean: 0.4 });
 * await trackers.close('finished');
 */
export function openTrackers(o: TrackerOptions, ctx: OpenTrackersContext): Trackers {
  const name = o.wandbRunName || ctx.defaultRunName;
  const run = {
    name,
    program: ctx.program,
    settings: ctx.settings,
    ...(ctx.warn ? { warn: ctx.warn } : {}),
  };
  const project = o.wandbProject || ctx.env.WANDB_PROJECT || `rtjob_${ctx.program}`;
  const flush = ctx.flushIntervalMs !== undefined ? { flushIntervalMs: ctx.flushIntervalMs } : {};
  // Every flag is checked before any tracker starts talking to a service.
  const wandbBase = (ctx.env.WANDB_BASE_URL || 'https://api.wandb.ai').replace(/\/+$/, '');
  const wandb =
    o.useWandb !== undefined ? wandbSink(o.useWandb, wandbBase, ctx.env, run.warn) : undefined;
  const mlflow = o.useMlflow !== undefined ? mlflowUri(o.useMlflow, ctx.env) : undefined;
  const otlp = o.otlpEndpoint !== undefined ? otlpTracesUrl(o.otlpEndpoint, ctx.env) : undefined;
  const list: Tracker[] = [];
  if (o.useTensorboard) list.push(openTensorBoard(o.useTensorboard, run));
  if (wandb) {
    const entity = o.wandbOrg || ctx.env.WANDB_ENTITY;
    // The SDK's WANDB_DIR: the directory that holds `wandb/`.
    const root = ctx.env.WANDB_DIR || '.';
    const where = {
      project,
      ...(entity ? { entity } : {}),
      ...(o.wandbGroup ? { group: o.wandbGroup } : {}),
    };
    list.push(
      wandb.mode === 'offline'
        ? openWandbOffline({ ...where, root }, run)
        : openWandb(
            { apiKey: wandb.apiKey, baseUrl: wandbBase, localRoot: root, ...where, ...flush },
            run,
          ),
    );
  }
  if (mlflow !== undefined) {
    const experiment = o.mlflowExperimentName || ctx.env.MLFLOW_EXPERIMENT_NAME || project;
    list.push(openMlflow({ uri: mlflow, experiment, env: ctx.env, ...flush }, run));
  }
  if (otlp !== undefined) {
    const target = {
      url: otlp,
      headers: otlpHeaders(ctx.env),
      service: ctx.env.OTEL_SERVICE_NAME || 'rtjob',
      model: ctx.genAi?.model ?? '',
      engine: ctx.genAi?.engine ?? '',
      ...flush,
    };
    list.push(openOtlp(target, run));
  }
  return {
    list,
    log(step, values) {
      for (const t of list) t.log(step, values);
    },
    async close(outcome, timeoutMs) {
      await Promise.all(list.map((t) => t.close(outcome, timeoutMs)));
    },
  };
}

/**
 * Where `--use-wandb` logs, read as the W&B SDK reads `WANDB_MODE`: `offline` (or `dryrun`) writes
 * a run for `wandb sync` and needs no key; `disabled` logs nothing; `online` needs a key. Unset,
 * a key makes it online and no key offline, with one line saying so (a cluster without internet
 * has no key to give).
 */
function wandbSink(
  flag: string,
  baseUrl: string,
  env: Readonly<Record<string, string | undefined>>,
  warn: ((line: string) => void) | undefined,
): { mode: 'online'; apiKey: string } | { mode: 'offline' } | undefined {
  const mode = (env.WANDB_MODE ?? '').trim().toLowerCase();
  if (mode === 'disabled') return undefined;
  if (mode === 'offline' || mode === 'dryrun') return { mode: 'offline' };
  if (mode !== '' && mode !== 'online' && mode !== 'run')
    throw new FlagError(
      '--use-wandb',
      `--use-wandb: WANDB_MODE '${env.WANDB_MODE}' is none of online, offline, dryrun, disabled`,
    );
  const apiKey = wandbApiKey(flag, baseUrl, env);
  if (apiKey !== undefined) return { mode: 'online', apiKey };
  if (mode !== '')
    throw new FlagError('--use-wandb', `--use-wandb: no API key (${wandbKeyHint(baseUrl)})`);
  (warn ?? ((l: string) => process.stderr.write(`${l}\n`)))(
    `wandb: no API key (${wandbKeyHint(baseUrl)}); the run is written offline for \`wandb sync\` (WANDB_MODE=offline says so without this line)`,
  );
  return { mode: 'offline' };
}

/**
 * A driver's options as tracker settings: every scalar option by its flag name, `secret` keys
 * shown as `(hidden)`.
 */
export function optionSettings(
  o: Readonly<Record<string, unknown>>,
  secret: readonly string[] = ['useWandb'],
): RunSetting[] {
  return Object.entries(o)
    .filter(([, v]) => v !== undefined && (typeof v !== 'object' || Array.isArray(v)))
    .filter(([, v]) => typeof v !== 'function')
    .map(([k, v]) => ({
      name: kebab(k),
      value:
        secret.includes(k) && v !== 'true'
          ? '(hidden)'
          : Array.isArray(v)
            ? v.join(' ')
            : String(v),
    }));
}
