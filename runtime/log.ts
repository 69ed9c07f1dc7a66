/**
 * A tiny leveled logger. Lines go to stderr as `rtjob <component> <level>: message`, so a worker's
 * runtime messages land in its log file next to the user's output. `RTJOB_LOG_LEVEL` picks the
 * level (`debug`, `info`, `warn`, `error`; default `warn`); `setLogSink` redirects lines (tests).
 *
 * @module
 */
import { readEnv } from './env.ts';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
const rank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

let threshold = rank[levelFromEnv()];

/** `RTJOB_LOG_LEVEL`; a bad value is reported once and `warn` used, since logging must not fail. */
function levelFromEnv(): LogLevel {
  try {
    return readEnv('RTJOB_LOG_LEVEL') ?? 'warn';
  } catch (e) {
    process.stderr.write(`rtjob: ${(e as Error).message}; using warn\n`);
    return 'warn';
  }
}
let sink: (level: LogLevel, component: string, message: string) => void = (level, c, m) => {
  process.stderr.write(`rtjob ${c} ${level}: ${m}\n`);
};

/** Replaces where log lines go; returns the previous sink. */
export function setLogSink(s: typeof sink): typeof sink {
  const prev = sink;
  sink = s;
  return prev;
}

/** Sets the minimum level that is written. */
export function setLogLevel(level: LogLevel): void {
  threshold = rank[level];
}

export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** A logger for one component (`head`, `node`, `worker`, `transport`, ...). */
export function logger(component: string): Logger {
  const at = (level: LogLevel) => (message: string) => {
    if (rank[level] >= threshold) sink(level, component, message);
  };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/**
 * Runs `fn` for an event (a socket closing, a timer firing) and logs what it throws instead of
 * letting it escape: an event handler must never take its process down.
 */
export function guarded(log: Logger, what: string, fn: () => void): void {
  try {
    fn();
  } catch (e) {
    log.error(`${what} failed: ${(e as Error)?.stack ?? String(e)}`);
  }
}
