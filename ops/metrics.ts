/**
 * Training metrics in one call: `metrics.log(step, { reward, kl })` from a job's driver or any of
 * its actors. Rows are batched (every 250 ms or 200 rows) and sent to the head, which stores them
 * in SQLite; they show up in the dashboard's charts, `rtjob metrics JOB [--csv]`,
 * `GET /api/jobs/:id/metrics` and Prometheus `/metrics`.
 *
 * `metrics.samples(step, records)` keeps a few example records of a step (for `train_ppo`, the
 * episodes: prompt, turns, reward); they show in the dashboard's Samples view and
 * `rtjob samples JOB`, bounded per job by the head (`sampleLimits` in `ops/jobs/ops-store.ts`).
 * `metrics.report(fields)` tells the job page about the run (total steps, config table, outputs).
 *
 * Outside a job (no `RTJOB_JOB_ID`), `log` only keeps the last values in memory (`latest()`) and
 * `samples` and `report` do nothing.
 *
 * @example
 * import { metrics } from 'rtjob';
 * metrics.log(step, { reward_mean: 0.42, kl: 0.01, tokens_per_s: 5120 });
 * await metrics.flush(); // before process.exit(), so the last rows are not lost
 *
 * @module
 */
import { readClusterFile } from '../runtime/cluster-file.ts';
import { readEnv } from '../runtime/env.ts';
import {
  fetchTransport,
  type JobCheckpoint,
  type JobReport,
  type JobSample,
  type LedgerEntryRecord,
  RestError,
  restClient,
} from './http/contract.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';

/** Numeric values by name; non-finite values are stored as gaps. */
export type MetricValues = Record<string, number>;

interface Row {
  step: number;
  time: number;
  values: MetricValues;
}

/**
 * One sample of a step: a JSON object with any fields; `key` groups it across steps (the same
 * prompt), `score` filters it (the job's report names it: `samples: { score: 'reward' }`).
 */
export interface SampleRecord {
  key?: string;
  score?: number;
}

export type { JobCheckpoint, JobReport };

/** Options of {@link createMetricsLogger}. */
export interface MetricsLoggerOptions {
  /** @default RTJOB_JOB_ID */
  jobId?: string;
  /** The head's HTTP URL. @default RTJOB_HTTP_ADDRESS, else dashboardUrl in ~/.rtjob/cluster.json */
  httpAddress?: string;
  /** @default RTJOB_TOKEN, else the token in ~/.rtjob/cluster.json */
  token?: string;
  /** @default 250 */
  flushIntervalMs?: number;
  /** @default 200 */
  maxBatchRows?: number;
}

/** A metrics logger; {@link metrics} is the process-wide one. */
export interface MetricsLogger {
  /** Records `values` for training step `step` (an integer). Never throws, never blocks. */
  log(step: number, values: MetricValues): void;
  /**
   * Stores `records` as the samples of step `step` (replacing any it had), after the metric rows
   * logged before it. Each record is a JSON object; `key` and `score` are indexed.
   */
  samples<T extends SampleRecord>(step: number, records: readonly T[]): void;
  /**
   * Merges `fields` into the job's report, which the dashboard and the jobs list read:
   * `totalSteps` (progress, ETA), `headline` (the metric to show in the jobs list), `config`
   * (rows of every effective setting), `outputs` (paths the run writes, by label).
   */
  report(fields: JobReport): void;
  /**
   * Stores `entries` in the job's ledger (`rtjob ledger JOB`): an entry sent again by its `id`
   * replaces the older state. Sent in order with the rest; nothing outside a job.
   */
  ledger<T extends { id: string; status: string }>(entries: readonly T[]): void;
  /** Sends everything buffered; resolves when the head has stored it (or gave up). */
  flush(): Promise<void>;
  /** The last value logged for each name. */
  latest(): MetricValues;
}

/** Creates a logger; most code uses the shared {@link metrics}. */
export function createMetricsLogger(opts: MetricsLoggerOptions = {}): MetricsLogger {
  const jobId = opts.jobId ?? readEnv('RTJOB_JOB_ID');
  let endpoint: { url: string; token: string; jobId: string } | null | undefined;
  const resolveEndpoint = () => {
    if (endpoint !== undefined) return endpoint;
    const file = opts.httpAddress && opts.token ? undefined : readClusterFile();
    const base = opts.httpAddress ?? readEnv('RTJOB_HTTP_ADDRESS') ?? file?.dashboardUrl;
    const token = opts.token ?? readEnv('RTJOB_TOKEN') ?? file?.token;
    endpoint = jobId && base && token ? { url: base, token, jobId } : null;
    return endpoint;
  };
  const flushIntervalMs = opts.flushIntervalMs ?? 250;
  const maxBatchRows = opts.maxBatchRows ?? 200;
  const latest: MetricValues = {};
  let buffer: Row[] = [];
  let timer: NodeJS.Timeout | undefined;
  let inFlight: Promise<void> = Promise.resolve();
  let warned = false;

  type Post =
    | { what: 'metric rows'; rows: Row[] }
    | { what: 'samples'; step: number; samples: JobSample[] }
    | { what: 'the report'; report: JobReport }
    | { what: 'ledger entries'; entries: LedgerEntryRecord[] };
  const post = (api: ReturnType<typeof restClient>, jobId: string, p: Post) => {
    const params = { jobId };
    if (p.what === 'metric rows')
      return api.call('POST /api/jobs/:jobId/metrics', { params, body: { rows: p.rows } });
    if (p.what === 'samples')
      return api.call('POST /api/jobs/:jobId/samples', {
        params,
        body: { step: p.step, samples: p.samples },
      });
    if (p.what === 'ledger entries')
      return api.call('POST /api/jobs/:jobId/ledger', { params, body: { entries: p.entries } });
    return api.call('POST /api/jobs/:jobId/report', { params, body: p.report });
  };
  const send = async (p: Post) => {
    const ep = resolveEndpoint();
    if (!ep) return;
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        const api = restClient(fetchTransport(ep.url, { authorization: `Bearer ${ep.token}` }));
        await post(api, ep.jobId, p);
        return;
      } catch (err) {
        // A refusal is final; otherwise the head may be restarting: try again shortly.
        if (err instanceof RestError && err.status < 500) {
          if (!warned)
            process.stderr.write(
              `rtjob metrics: the head refused ${p.what} (${err.status}: ${err.message})\n`,
            );
          warned = true;
          return;
        }
      }
      await new Promise((r) => setTimeout(r, 200 * (attempt + 1)));
    }
    if (!warned)
      process.stderr.write(`rtjob metrics: could not reach the head at ${ep.url}; rows dropped\n`);
    warned = true;
  };

  const flushNow = (): Promise<void> => {
    if (timer) {
      clearTimeout(timer);
      timer = undefined;
    }
    if (buffer.length === 0) return inFlight;
    const rows = buffer;
    buffer = [];
    // Batches go out one at a time so the head stores them in order.
    inFlight = inFlight.then(() => send({ what: 'metric rows', rows }));
    return inFlight;
  };

  let hooked = false;
  return {
    log(step, values) {
      if (!Number.isInteger(step))
        throw new InvalidArgumentError(`metrics.log: step must be an integer, got ${step}`);
      const clean: MetricValues = {};
      for (const [k, v] of Object.entries(values)) {
        if (typeof v === 'number') {
          clean[k] = v;
          latest[k] = v;
        }
      }
      if (!resolveEndpoint()) return;
      if (!hooked) {
        hooked = true;
        // A driver that simply returns from main still gets its last rows stored.
        process.once('beforeExit', () => void flushNow());
      }
      buffer.push({ step, time: Date.now(), values: clean });
      if (buffer.length >= maxBatchRows) void flushNow();
      else timer ??= setTimeout(() => void flushNow(), flushIntervalMs);
    },
    samples(step, records) {
      if (!Number.isInteger(step))
        throw new InvalidArgumentError(`metrics.samples: step must be an integer, got ${step}`);
      if (!resolveEndpoint()) return;
      void flushNow();
      const p: Post = { what: 'samples', step, samples: records as unknown as JobSample[] };
      inFlight = inFlight.then(() => send(p));
    },
    report(fields) {
      if (!resolveEndpoint()) return;
      inFlight = inFlight.then(() => send({ what: 'the report', report: fields }));
    },
    ledger(entries) {
      if (!resolveEndpoint()) return;
      // Chunks the head takes in one request (`ledgerLimits` in ops/jobs/ledger-store.ts).
      for (let i = 0; i < entries.length; i += 1000) {
        const part = entries.slice(i, i + 1000) as unknown as LedgerEntryRecord[];
        const chunk: Post = { what: 'ledger entries', entries: part };
        inFlight = inFlight.then(() => send(chunk));
      }
    },
    flush: flushNow,
    latest: () => ({ ...latest }),
  };
}

/** The process-wide metrics logger. */
export const metrics: MetricsLogger = createMetricsLogger();
