/**
 * `--use-mlflow URI`: an MLflow run on a tracking server, through MLflow's documented REST API
 * (`/api/2.0/mlflow/...`): `experiments/get-by-name` (else `experiments/create`) for the
 * experiment, `runs/create` with the run's name, `runs/log-batch` for the settings (as params)
 * and every step's metrics (within the documented limits of 1000 metrics and 100 params a
 * request), and `runs/update` with `FINISHED` or `FAILED` at the end. Authentication as MLflow's
 * clients do it: `MLFLOW_TRACKING_TOKEN` as a bearer token, or `MLFLOW_TRACKING_USERNAME` and
 * `MLFLOW_TRACKING_PASSWORD` as HTTP Basic.
 *
 * No official MLflow client for Node tracks runs (the `mlflow` npm package is a third party's),
 * so rtjob speaks the REST API itself. A local `file:` store is MLflow's Python-side format and
 * is refused: point `--use-mlflow` at a tracking server (`mlflow server`).
 *
 * @module
 */
import { FlagError } from '../driver-flags.ts';
import {
  Outbox,
  type Row,
  type Tracker,
  type TrackerRun,
  TrackerError,
  requestJson,
} from './tracker.ts';

/** Where an MLflow run is made. */
export interface MlflowTarget {
  /** The tracking server, `http(s)://host:port[/prefix]`. */
  uri: string;
  experiment: string;
  /** `MLFLOW_TRACKING_TOKEN`, `MLFLOW_TRACKING_USERNAME`, `MLFLOW_TRACKING_PASSWORD`. */
  env: Readonly<Record<string, string | undefined>>;
  /** @default 2000 */
  flushIntervalMs?: number;
}

/** The documented per-request limits of `runs/log-batch`. */
const MAX_METRICS = 1000;
const MAX_PARAMS = 100;
/** Longest param value MLflow 2 stores (6000 characters); longer ones are cut with a mark. */
const MAX_PARAM_VALUE = 6000;

/** `--use-mlflow`'s tracking URI: its value, else `MLFLOW_TRACKING_URI`; http(s) only. */
export function mlflowUri(flag: string, env: Readonly<Record<string, string | undefined>>): string {
  const uri = flag === 'true' ? env.MLFLOW_TRACKING_URI : flag;
  if (!uri)
    throw new FlagError(
      '--use-mlflow',
      '--use-mlflow: give the tracking server (--use-mlflow http://host:5000) or set MLFLOW_TRACKING_URI',
    );
  if (!/^https?:\/\/[^/\s]+/.test(uri))
    throw new FlagError(
      '--use-mlflow',
      `--use-mlflow: '${uri}' is not an http(s) tracking server (a file: store is written by MLflow's Python client only; run \`mlflow server\` and point here)`,
    );
  return uri.replace(/\/+$/, '');
}

/** A call to the MLflow REST API of `t` (with its token or basic auth from the environment). */
type MlflowCall = <T>(route: string, body?: unknown, method?: string) => Promise<T>;

function mlflowCall(t: MlflowTarget): MlflowCall {
  const api = `${t.uri}/api/2.0/mlflow`;
  const headers: Record<string, string> = {};
  if (t.env.MLFLOW_TRACKING_TOKEN) headers.authorization = `Bearer ${t.env.MLFLOW_TRACKING_TOKEN}`;
  else if (t.env.MLFLOW_TRACKING_USERNAME)
    headers.authorization = `Basic ${Buffer.from(`${t.env.MLFLOW_TRACKING_USERNAME}:${t.env.MLFLOW_TRACKING_PASSWORD ?? ''}`).toString('base64')}`;
  return <T>(route: string, body?: unknown, method = 'POST') =>
    requestJson<T>('mlflow', `${api}/${route}`, {
      method,
      headers,
      ...(body !== undefined ? { body } : {}),
    });
}

/** The id of the experiment named `name`; the first run of an experiment makes it. */
async function experimentIdOf(call: MlflowCall, name: string): Promise<string> {
  try {
    const got = await call<{ experiment: { experiment_id: string } }>(
      `experiments/get-by-name?experiment_name=${encodeURIComponent(name)}`,
      undefined,
      'GET',
    );
    return got.experiment.experiment_id;
  } catch (err) {
    // 404 RESOURCE_DOES_NOT_EXIST: the first run of this experiment makes it.
    if (!(err instanceof TrackerError) || !/answered 404/.test(err.message)) throw err;
  }
  const made = await call<{ experiment_id: string }>('experiments/create', { name });
  return made.experiment_id;
}

/** Creates the run in the experiment; returns the run's id. */
async function createRun(call: MlflowCall, experimentId: string, run: TrackerRun): Promise<string> {
  const made = await call<{ run: { info: { run_id: string } } }>('runs/create', {
    experiment_id: experimentId,
    run_name: run.name,
    start_time: Date.now(),
    tags: [
      { key: 'mlflow.runName', value: run.name },
      { key: 'mlflow.source.name', value: `rtjob ${run.program}` },
      { key: 'mlflow.source.type', value: 'JOB' },
    ],
  });
  return made.run.info.run_id;
}

/** Logs the run's settings as its params ({@link MAX_PARAMS} a request, values cut to fit). */
async function logParams(call: MlflowCall, runId: string, run: TrackerRun): Promise<void> {
  const params = run.settings
    .filter((s) => s.value !== '')
    .map((s) => ({
      key: s.name,
      value:
        s.value.length > MAX_PARAM_VALUE ? `${s.value.slice(0, MAX_PARAM_VALUE - 3)}...` : s.value,
    }));
  for (let i = 0; i < params.length; i += MAX_PARAMS)
    await call('runs/log-batch', { run_id: runId, params: params.slice(i, i + MAX_PARAMS) });
}

/**
 * Sends `rows` as metric batches of at most {@link MAX_METRICS}: whole rows per request where
 * they fit, so a failed request resends no stored row (`taken(n)`: the first n rows are sent).
 */
async function sendRows(
  call: MlflowCall,
  runId: string | undefined,
  rows: Row[],
  taken: (n: number) => void,
): Promise<void> {
  let batch: { key: string; value: number; timestamp: number; step: number }[] = [];
  const post = async () => {
    if (batch.length) await call('runs/log-batch', { run_id: runId, metrics: batch });
    batch = [];
  };
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i]!;
    // MLflow's JSON has no NaN or infinity; a gap is left instead.
    const ms = Object.entries(r.values)
      .filter(([, v]) => Number.isFinite(v))
      .map(([key, value]) => ({ key, value, timestamp: r.time, step: r.step }));
    if (batch.length + ms.length > MAX_METRICS) {
      await post();
      taken(i);
    }
    for (let k = 0; k < ms.length; k += MAX_METRICS) {
      batch.push(...ms.slice(k, k + MAX_METRICS));
      if (batch.length >= MAX_METRICS) await post();
    }
  }
  await post();
}

/** Opens an MLflow run; it is created in the background, and a server that is away only warns. */
export function openMlflow(t: MlflowTarget, run: TrackerRun): Tracker {
  const warn = run.warn ?? ((l: string) => process.stderr.write(`${l}\n`));
  const call = mlflowCall(t);
  let runId: string | undefined;
  let experimentId: string | undefined;
  const outbox = new Outbox({
    kind: 'mlflow',
    warn,
    ...(t.flushIntervalMs !== undefined ? { flushIntervalMs: t.flushIntervalMs } : {}),
    async start() {
      experimentId ??= await experimentIdOf(call, t.experiment);
      runId ??= await createRun(call, experimentId, run);
      await logParams(call, runId, run);
    },
    send: (rows: Row[], taken: (n: number) => void) => sendRows(call, runId, rows, taken),
  });
  void outbox.flush();
  return {
    kind: 'mlflow',
    where: () =>
      runId && experimentId ? `${t.uri}/#/experiments/${experimentId}/runs/${runId}` : undefined,
    log(step, values) {
      outbox.push({ step, time: Date.now(), values: { ...values } });
    },
    close(outcome, timeoutMs = 30_000) {
      return outbox.close(async () => {
        await call('runs/update', {
          run_id: runId,
          status: outcome === 'failed' ? 'FAILED' : 'FINISHED',
          end_time: Date.now(),
        });
      }, timeoutMs);
    },
  };
}
