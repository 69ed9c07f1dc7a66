/**
 * What every experiment tracker is to a driver ({@link Tracker}), and how the network ones deliver
 * without ever holding up training ({@link Outbox}): rows are queued, sent in the background in
 * order, and kept while the service cannot be reached; the first failure prints one warning line
 * and the run goes on. rtjob's own history (the head's metrics) never depends on a tracker.
 *
 * @module
 */
import { RtjobError } from '../../runtime/errors.ts';

/** One effective setting of a run, as trackers record it (flag name without `--`, value as text). */
export interface RunSetting {
  name: string;
  value: string;
}

/** What a driver tells a tracker when it opens one. */
export interface TrackerRun {
  /** The run's name (`--wandb-run-name`, else the job id or `run-<time>`). */
  name: string;
  /** `train_ppo` or `train_sft`. */
  program: string;
  /** Every effective setting, secrets already hidden. */
  settings: RunSetting[];
  /** Where a warning goes (one line each). @default stderr */
  warn?: (line: string) => void;
}

/** An experiment tracker: TensorBoard files, a W&B run, an MLflow run. */
export interface Tracker {
  /** `tensorboard`, `wandb`, `mlflow`. */
  readonly kind: string;
  /** Where the run can be found (a directory or a URL), once known. */
  where(): string | undefined;
  /** Records one step's values; never throws, never waits. */
  log(step: number, values: Readonly<Record<string, number>>): void;
  /** Delivers what is queued and ends the run (`failed` marks it so); resolves within `timeoutMs`. */
  close(outcome: 'finished' | 'failed', timeoutMs?: number): Promise<void>;
}

/** A tracker service answered with an error, or was not reached. */
export class TrackerError extends RtjobError<'TRACKER'> {
  override get name(): string {
    return 'TrackerError';
  }

  constructor(
    readonly tracker: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super('TRACKER', `${tracker}: ${message}`, options);
  }
}

/** A JSON request to a tracker's HTTP API, with a time limit; a non-2xx answer throws {@link TrackerError}. */
export async function requestJson<T>(
  tracker: string,
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: unknown; timeoutMs?: number },
): Promise<T> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: init.method ?? 'POST',
      headers: { 'content-type': 'application/json', ...init.headers },
      ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
      signal: AbortSignal.timeout(init.timeoutMs ?? 15_000),
    });
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
    throw new TrackerError(tracker, `cannot reach ${new URL(url).origin} (${cause})`, {
      cause: err,
    });
  }
  const text = await res.text();
  if (!res.ok)
    throw new TrackerError(
      tracker,
      `${init.method ?? 'POST'} ${new URL(url).pathname} answered ${res.status}: ${text.slice(0, 200)}`,
    );
  return (text ? JSON.parse(text) : {}) as T;
}

/** One step's values as a network tracker queues them. */
export interface Row {
  step: number;
  /** Unix milliseconds when it was logged. */
  time: number;
  values: Record<string, number>;
}

/** Options of {@link Outbox}. */
export interface OutboxOptions {
  /** The tracker's kind, for messages. */
  kind: string;
  /** Creates the remote run; called again before each send until it succeeds. */
  start: () => Promise<void>;
  /**
   * Sends rows, in order, calling `taken(n)` when the service has stored the first `n` of them
   * (so a failure part-way resends only the rest); throws when not all were taken.
   */
  send: (rows: Row[], taken: (n: number) => void) => Promise<void>;
  /** @default 2000 */
  flushIntervalMs?: number;
  /** Rows kept while the service is away; older ones go first. @default 100000 */
  maxPending?: number;
  /** Where the rows not delivered can still be found. @default `rtjob metrics JOB --csv has them all` */
  lostHint?: string;
  warn: (line: string) => void;
}

/**
 * The queue between a driver and a network tracker. `push` returns at once; a timer sends what
 * is queued, one request at a time, in order. A failed send keeps its rows for the next try and
 * warns once (`<kind>: … ; the run goes on …`); a later success says so once.
 */
export class Outbox {
  readonly #o: Required<OutboxOptions>;
  #pending: Row[] = [];
  #started = false;
  #chain: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout | undefined;
  #warned = false;
  #failing = false;
  #dropped = 0;

  constructor(o: OutboxOptions) {
    this.#o = {
      flushIntervalMs: 2000,
      maxPending: 100_000,
      lostHint: 'rtjob metrics JOB --csv has them all',
      ...o,
    };
  }

  push(row: Row): void {
    this.#pending.push(row);
    if (this.#pending.length > this.#o.maxPending) {
      this.#pending.shift();
      this.#dropped++;
    }
    if (!this.#timer) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        void this.flush();
      }, this.#o.flushIntervalMs);
      this.#timer.unref();
    }
  }

  /** Rows not yet taken by the service. */
  get pending(): number {
    return this.#pending.length;
  }

  /** Sends everything queued now; resolves when that try ends (it never rejects). */
  flush(): Promise<void> {
    this.#chain = this.#chain.then(() => this.#attempt());
    return this.#chain;
  }

  async #attempt(): Promise<void> {
    try {
      if (!this.#started) {
        await this.#o.start();
        this.#started = true;
      }
      while (this.#pending.length) {
        const rows = this.#pending.slice(0, 500);
        let done = 0;
        await this.#o.send(rows, (n) => {
          this.#pending.splice(0, n - done);
          done = n;
        });
        this.#pending.splice(0, rows.length - done);
      }
      if (this.#failing) {
        this.#failing = false;
        this.#o.warn(`${this.#o.kind}: reached again; the queued rows were delivered`);
      }
    } catch (err) {
      this.#failing = true;
      if (!this.#warned) {
        this.#warned = true;
        this.#o.warn(
          `${(err as Error).message}; the run goes on (rtjob's own metrics keep every row) and ${this.#o.kind} is retried`,
        );
      }
    }
  }

  /**
   * A last flush, waiting at most `timeoutMs`; then `final` (the run's end) when everything was
   * delivered. Says in one line what could not be delivered.
   */
  async close(final: () => Promise<void>, timeoutMs: number): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    // Never rejects: a failure to end the run comes back as its error.
    const done = this.flush()
      .then(async () => {
        if (this.#started && this.#pending.length === 0) await final();
      })
      .catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))));
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((r) => {
      timer = setTimeout(() => r('late'), timeoutMs);
      timer.unref();
    });
    const outcome = await Promise.race([done, late]);
    clearTimeout(timer);
    const lost = this.#pending.length + this.#dropped;
    const why =
      outcome instanceof Error ? outcome.message : outcome === 'late' ? 'no answer in time' : '';
    if (lost > 0)
      this.#o.warn(
        `${this.#o.kind}: ${lost} step row(s) not delivered${why ? ` (${why})` : ''}; ${this.#o.lostHint}`,
      );
    else if (why) this.#o.warn(`${this.#o.kind}: the run was not marked ended (${why})`);
  }
}
