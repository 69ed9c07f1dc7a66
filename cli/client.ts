/**
 * The CLI's HTTP client for the head's `/api/` (the typed REST contract of
 * `ops/http/contract.ts`), with the token on every request and the API's errors turned
 * into {@link CliError}s that carry an exit code.
 *
 * @module
 */
import { readFileSync, statSync } from 'node:fs';

import WebSocket from 'ws';

import { RtjobError } from '../runtime/index.ts';
import {
  fetchTransport,
  logTailPath,
  readClusterFile,
  readEnv,
  restClient,
  type RestClient,
  RestError,
  type RouteKey,
  rtjobHome,
  sessionServer,
} from '../ops/index.ts';

const codeOfExit: Record<number, string> = {
  1: 'CLI_FAILED',
  2: 'CLI_USAGE',
  3: 'CLI_UNREACHABLE',
};

/**
 * An error the CLI prints as one line and exits with `exitCode`: 1 a job failed or a request was
 * refused, 2 bad usage, 3 no cluster reachable. `code` is the API's error code when the head
 * refused the request (`UNKNOWN_JOB`), else `CLI_FAILED`, `CLI_USAGE` or `CLI_UNREACHABLE`.
 */
export class CliError extends RtjobError {
  override get name(): string {
    return 'CliError';
  }

  constructor(
    message: string,
    readonly exitCode = 1,
    code?: string,
  ) {
    super(code ?? codeOfExit[exitCode] ?? 'CLI_FAILED', message);
  }
}

/** Where and how to reach a head's HTTP API. */
export interface Endpoint {
  url: string;
  token: string;
}

/** Normalises `host:port` or a URL into an http URL without a trailing slash. */
export function httpUrl(address: string): string {
  const withScheme = /^https?:\/\//.test(address) ? address : `http://${address}`;
  return withScheme.replace(/\/+$/, '');
}

/** How a command is given the cluster token: `--token T`, or `--token-file PATH`. */
export interface TokenOptions {
  token?: string;
  /** A file holding the token, not readable by every user (0600, or 0440 for a group). */
  tokenFile?: string;
}

/**
 * The token given on this command: `--token`, else the content of `--token-file` (refused when
 * any user may read the file); undefined when neither is given.
 */
export function givenToken(o: TokenOptions): string | undefined {
  if (o.tokenFile === undefined) return o.token;
  if (o.token !== undefined)
    throw new CliError('give the token by --token or by --token-file, not both', 2);
  let mode: number;
  let token: string;
  try {
    mode = statSync(o.tokenFile).mode;
    token = readFileSync(o.tokenFile, 'utf8').trim();
  } catch (err) {
    throw new CliError(
      `--token-file ${o.tokenFile}: cannot read it (${(err as NodeJS.ErrnoException).code ?? String(err)})`,
      2,
    );
  }
  // Group-readable is allowed: a Kubernetes Secret reaches a non-root container that way.
  if (mode & 0o007)
    throw new CliError(
      `--token-file ${o.tokenFile}: any user may read it (mode ${(mode & 0o777).toString(8)}); chmod 600 it`,
      2,
    );
  if (!token) throw new CliError(`--token-file ${o.tokenFile}: the file is empty`, 2);
  return token;
}

/**
 * The endpoint from `--address` and `--token`/`--token-file`, `RTJOB_HTTP_ADDRESS`/`RTJOB_TOKEN`,
 * or `~/.rtjob/cluster.json`; undefined when none is configured or the recorded head is gone.
 */
export function findEndpoint(opts: { address?: string } & TokenOptions): Endpoint | undefined {
  const given = givenToken(opts);
  const address = opts.address ?? readEnv('RTJOB_HTTP_ADDRESS');
  if (address) {
    const token = given ?? readEnv('RTJOB_TOKEN') ?? readClusterFile()?.token;
    if (!token) throw new CliError('no token: pass --token or set RTJOB_TOKEN', 2);
    return { url: httpUrl(address), token };
  }
  const file = readClusterFile({ live: true });
  if (file?.dashboardUrl) return { url: file.dashboardUrl, token: given ?? file.token };
  // A machine that joined knows the head's runtime address: its HTTP API is on the same host, on
  // the default dashboard port unless the head was started with another (then pass --address).
  if (file?.role === 'node') {
    const host = file.address.replace(/:\d+$/, '');
    return { url: httpUrl(`${host}:8265`), token: given ?? file.token };
  }
  return undefined;
}

export function requireEndpoint(opts: { address?: string } & TokenOptions): Endpoint {
  const ep = findEndpoint(opts);
  if (!ep)
    throw new CliError(
      'no cluster is running: start one with `rtjob start --head`, or pass --address',
      3,
    );
  return ep;
}

/** Where a reading command gets its answers: a live head, or a finished session served here. */
export interface ReadTarget {
  ep: Endpoint;
  /** The session dir when it is a finished session (read-only). */
  session?: string;
  close(): Promise<void>;
}

/**
 * The head to read jobs, logs, metrics and samples from: `--session DIR` (a finished session, read
 * from disk), else the running cluster, else the latest session on this machine (`~/.rtjob/session`
 * or a private cluster's `~/.rtjob/runs/*`), read from disk.
 */
export async function openReadTarget(
  opts: { address?: string; session?: string } & TokenOptions,
): Promise<ReadTarget> {
  const { isSessionDir, listSessions, serveSession } = await sessionServer();
  let dir = opts.session;
  let older: string[] = [];
  if (!dir) {
    const ep = findEndpoint(opts);
    if (ep) return { ep, close: async () => undefined };
    [dir, ...older] = listSessions(rtjobHome());
    if (!dir) {
      throw new CliError(
        'no cluster is running and no finished session is on this machine: run a job with `rtjob submit -- train_ppo`, or pass --address or --session DIR',
        3,
      );
    }
    process.stderr.write(
      older.length
        ? `(no cluster running: reading the run history, ${older.length + 1} finished sessions under ${rtjobHome()})\n`
        : `(no cluster running: reading the finished session ${dir})\n`,
    );
  }
  if (!isSessionDir(dir))
    throw new CliError(`--session ${dir}: not a session dir (no head.sqlite in it)`, 2);
  const s = await serveSession({ sessionDir: dir, dashboard: false, olderSessionDirs: older });
  return { ep: { url: s.url, token: s.token }, session: dir, close: () => s.close() };
}

/**
 * The typed client of the head's REST API (`ops/http/contract.ts`) at `ep`: the token on
 * every request, and failures as {@link CliError}s — 3 when the head cannot be reached, 2 for a
 * bad request (400, 413), 1 for any other refusal — carrying the API's error code.
 *
 * @example
 * const { jobs } = await headApi(ep).call('GET /api/jobs');
 */
export function headApi(ep: Endpoint): RestClient {
  const inner = restClient(fetchTransport(ep.url, { authorization: `Bearer ${ep.token}` }));
  const call = async (key: RouteKey, ...args: unknown[]): Promise<unknown> => {
    try {
      return await (inner.call as (k: RouteKey, ...a: unknown[]) => Promise<unknown>)(key, ...args);
    } catch (err) {
      if (!(err instanceof RestError)) {
        const why = (err as Error & { cause?: Error }).cause?.message ?? (err as Error).message;
        const hint = /ECONNREFUSED/.test(why)
          ? ' (no head listens there: on its machine, `rtjob start --head` starts it again and recovers its state)'
          : '';
        throw new CliError(`cannot reach the head at ${ep.url}: ${why}${hint}`, 3);
      }
      if (err.status === 401)
        throw new CliError(
          'the head refused the token (401): check --token / RTJOB_TOKEN',
          1,
          err.code,
        );
      throw new CliError(err.message, err.status === 400 || err.status === 413 ? 2 : 1, err.code);
    }
  };
  return { call: call as RestClient['call'] };
}

/**
 * Follows a job's log over the WebSocket tail, writing chunks to `out`; resolves when the job
 * finishes (the server closes) or `signal` aborts.
 */
export function tailJobLogs(
  ep: Endpoint,
  jobId: string,
  out: (s: string) => void,
  signal?: AbortSignal,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const wsUrl = ep.url.replace(/^http/, 'ws') + logTailPath(jobId);
    const ws = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${ep.token}` } });
    const onAbort = () => ws.close();
    signal?.addEventListener('abort', onAbort, { once: true });
    ws.on('message', (data) => out(data.toString()));
    ws.on('close', () => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    });
    ws.on('unexpected-response', (_req, res) => {
      reject(
        new CliError(
          res.statusCode === 404
            ? `no job with id ${jobId}`
            : `log tail refused: HTTP ${res.statusCode}`,
          1,
        ),
      );
    });
    ws.on('error', (err) => reject(new CliError(`log tail failed: ${err.message}`, 3)));
  });
}
