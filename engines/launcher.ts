/**
 * Starts an inference server (SGLang, vLLM, or anything with a health route) as a child process
 * on the GPUs the runtime gave the caller, waits until it answers its health route, streams its
 * output line by line to a sink, and stops it with everything it started.
 *
 * No orphans: the server runs in its own process group under a small guard process. `stop()`
 * sends SIGTERM to the group, SIGKILL after a grace period, and sweeps the group again once the
 * server has exited. The guard also watches the launching process and takes the group down when
 * it dies, even by SIGKILL; a normal exit of the launching process kills live groups at once.
 *
 * @example
 * const server = await launchServer({
 *   command: 'python', args: ['-m', 'sglang.launch_server', '--model-path', dir, '--port', '30000'],
 *   url: 'http://127.0.0.1:30000', cudaVisibleDevices: [0, 1], logSink: (l) => console.log(l),
 * });
 * const engine = new SglangEngine({ urls: [server.url] });
 * ...
 * await server.stop();
 *
 * {@link launchServerCommand} does the same from one command line with `{port}` and `{model}` in
 * it (train_ppo's `--engine-launch`).
 *
 * @module
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { createInterface } from 'node:readline';

import { InvalidArgumentError, RtjobError } from '../runtime/errors.ts';
import { httpCall } from './http/http-call.ts';
import { serverSpec, type ServerEngineKind } from './registry.ts';
import type { LoraServerSlots, ServerArgs } from './types.ts';

/** Options of {@link launchServer}. */
export interface LaunchServerOptions {
  /** The executable, e.g. `python` or `vllm`. */
  command: string;
  /** How errors name the server. @default the command */
  name?: string;
  /** @default [] */
  args?: string[];
  /** Added to the launching process's environment. */
  env?: Record<string, string>;
  /** Sets `CUDA_VISIBLE_DEVICES` (ids joined by commas). Unset keeps the inherited value. */
  cudaVisibleDevices?: string | number[];
  cwd?: string;
  /** The server's base URL when known (you passed its port). */
  url?: string;
  /**
   * Otherwise found in its output: the first capture group of the first matching line, a URL or a
   * port on 127.0.0.1. @default /listening on (http:\/\/\S+)/
   */
  urlFromLog?: RegExp;
  /** @default '/health' */
  healthPath?: string;
  /** Give up (and stop the server) when it is not healthy by then. @default 600_000 */
  readyTimeoutMs?: number;
  /** Time between readiness probes. @default 500 */
  pollIntervalMs?: number;
  /** Receives every output line. @default nothing */
  logSink?: (line: string, stream: 'stdout' | 'stderr') => void;
  /** Time between SIGTERM and SIGKILL when stopping. @default 10_000 */
  stopGraceMs?: number;
}

/** Defaults of {@link LaunchServerOptions}. */
export const launchServerDefaults = {
  urlFromLog: /listening on (http:\/\/\S+)/,
  healthPath: '/health',
  readyTimeoutMs: 600_000,
  pollIntervalMs: 500,
  stopGraceMs: 10_000,
} as const;

/** How a server process ended. */
export interface ServerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A running server. */
export interface LaunchedServer {
  /** Base URL, e.g. `http://127.0.0.1:30000`. */
  readonly url: string;
  /** The process group id (the guard's pid). */
  readonly pid: number;
  /** Resolves when the server has exited. */
  readonly exited: Promise<ServerExit>;
  /** The last output lines (for error reports). */
  logTail(): string[];
  /** Stops the server and everything it started; resolves with how it ended. */
  stop(): Promise<ServerExit>;
}

/** Why a server launch failed. */
export type ServerLaunchErrorCode =
  /** The server exited before it answered its health check. */
  | 'SERVER_EXITED'
  /** The server did not answer its health check within `readyTimeoutMs` (it was stopped). */
  | 'SERVER_NOT_READY';

/** A server that exited before it was healthy, or was not healthy in time. */
export class ServerLaunchError extends RtjobError<ServerLaunchErrorCode> {
  override get name(): string {
    return 'ServerLaunchError';
  }

  readonly logTail: string[];

  constructor(code: ServerLaunchErrorCode, message: string, logTail: string[]) {
    super(code, `${message}\n--- last output ---\n${logTail.join('\n')}`);
    this.logTail = logTail;
  }
}

/**
 * The guard, run as `node -e`: starts the command in its (new) process group, passes its exit
 * status on, and kills the group when the launching process is gone.
 */
const guardSource = `
const { spawn } = require('node:child_process');
const [parentPid, graceMs, cmd, ...args] = JSON.parse(process.argv[1]);
const child = spawn(cmd, args, { stdio: 'inherit' });
const killGroup = (sig) => { try { process.kill(-process.pid, sig); } catch {} };
process.on('SIGTERM', () => {});
process.on('SIGINT', () => {});
child.on('error', (e) => { console.error('cannot start ' + cmd + ': ' + e.message); process.exit(127); });
child.on('exit', (code, signal) => process.exit(code ?? 128 + (require('node:os').constants.signals[signal] ?? 0)));
setInterval(() => {
  if (process.ppid === parentPid) return;
  killGroup('SIGTERM');
  setTimeout(() => killGroup('SIGKILL'), graceMs).unref();
}, 300);
`;

const liveGroups = new Set<number>();
let exitHookInstalled = false;

function killGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // Already gone.
  }
}

/** Starts a server and resolves once it answers its health route; see the module comment. */
export async function launchServer(options: LaunchServerOptions): Promise<LaunchedServer> {
  const opts = { ...launchServerDefaults, ...options };
  const env: NodeJS.ProcessEnv = { ...process.env, ...opts.env };
  if (opts.cudaVisibleDevices !== undefined) {
    env.CUDA_VISIBLE_DEVICES = Array.isArray(opts.cudaVisibleDevices)
      ? opts.cudaVisibleDevices.join(',')
      : opts.cudaVisibleDevices;
  }
  const payload = JSON.stringify([
    process.pid,
    opts.stopGraceMs,
    opts.command,
    ...(opts.args ?? []),
  ]);
  const child = spawn(process.execPath, ['-e', guardSource, payload], {
    env,
    cwd: opts.cwd,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const pid = child.pid!;
  liveGroups.add(pid);
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', () => {
      for (const g of liveGroups) killGroup(g, 'SIGKILL');
    });
  }

  const tail: string[] = [];
  let url = opts.url?.replace(/\/+$/, '');
  const exited = new Promise<ServerExit>((resolve) => {
    child.once('exit', (code, signal) => {
      liveGroups.delete(pid);
      // The server is gone; sweep anything it left in its group.
      killGroup(pid, 'SIGKILL');
      resolve({ code, signal });
    });
  });
  let hasExited = false;
  void exited.then(() => (hasExited = true));
  for (const [stream, s] of [
    ['stdout', child.stdout!],
    ['stderr', child.stderr!],
  ] as const) {
    createInterface({ input: s }).on('line', (line) => {
      tail.push(line);
      if (tail.length > 50) tail.shift();
      if (url === undefined) {
        const m = opts.urlFromLog.exec(line);
        if (m?.[1])
          url = /^\d+$/.test(m[1]) ? `http://127.0.0.1:${m[1]}` : m[1].replace(/\/+$/, '');
      }
      opts.logSink?.(line, stream);
    });
  }

  let stopping: Promise<ServerExit> | null = null;
  const stop = (): Promise<ServerExit> => {
    stopping ??= (async () => {
      if (!hasExited) {
        killGroup(pid, 'SIGTERM');
        const timer = setTimeout(() => killGroup(pid, 'SIGKILL'), opts.stopGraceMs);
        await exited;
        clearTimeout(timer);
      }
      return exited;
    })();
    return stopping;
  };

  const deadline = Date.now() + opts.readyTimeoutMs;
  for (;;) {
    if (hasExited) {
      const e = await exited;
      throw new ServerLaunchError(
        'SERVER_EXITED',
        `${opts.name ?? opts.command} exited (code ${e.code}, signal ${e.signal}) before it was healthy`,
        [...tail],
      );
    }
    if (Date.now() > deadline) {
      await stop();
      throw new ServerLaunchError(
        'SERVER_NOT_READY',
        `${opts.name ?? opts.command} was not healthy within ${opts.readyTimeoutMs} ms`,
        [...tail],
      );
    }
    if (url !== undefined) {
      const ok = await httpCall(url + opts.healthPath, undefined, {
        timeoutMs: Math.max(1000, opts.pollIntervalMs * 4),
      }).then(
        () => true,
        () => false,
      );
      if (ok) break;
    }
    await Promise.race([new Promise((r) => setTimeout(r, opts.pollIntervalMs)), exited]);
  }
  const readyUrl = url!;
  return { url: readyUrl, pid, exited, logTail: () => [...tail], stop };
}

/** A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

/** Quotes `s` for a POSIX shell. */
function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** How a LoRA policy's servers must be started (see {@link loraServerArgs}). */
export interface LoraServerOptions extends LoraServerSlots {
  /** An engine on servers (`sglang`, `vllm`). */
  engine: ServerEngineKind;
}

/**
 * The server flags (and environment) a LoRA policy needs for run-time adapter loading, from the
 * engine's registry entry (vLLM's in `engines/vllm/lora-args.ts`, SGLang's in
 * `engines/sglang/lora-args.ts`): rank and modules fix the adapter memory pool, since no adapter
 * is given at start.
 *
 * @example
 * loraServerArgs({ engine: 'vllm', slots: 3, rank: 16, targetModules: ['q_proj', 'v_proj'] })
 * // { args: ['--enable-lora', '--max-loras', '3', '--max-cpu-loras', '3', '--max-lora-rank', '16'],
 * //   env: { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' } }
 */
export function loraServerArgs(o: LoraServerOptions): ServerArgs {
  if (!Number.isInteger(o.slots) || o.slots < 2)
    throw new InvalidArgumentError(`LoRA slots must be an integer ≥ 2, got ${o.slots}`);
  return serverSpec(o.engine).loraServerArgs(o);
}

/**
 * Starts the server a shell command line describes (run by `sh -c`, in its own process group as
 * {@link launchServer} does), after filling in `{port}` with a free port on 127.0.0.1 and
 * `{model}` with `model`, quoted; resolves once `http://127.0.0.1:{port}` answers its health route.
 * With `lora`, {@link loraServerArgs}' flags replace `{lora}` in the line (or are appended to
 * it) and its environment is added.
 *
 * @example
 * const server = await launchServerCommand(
 *   'python -m sglang.launch_server --model-path {model} --port {port} --enable-memory-saver',
 *   { model: '/shared/policy' },
 * );
 */
export async function launchServerCommand(
  commandLine: string,
  o: { model: string; lora?: LoraServerOptions } & Omit<
    LaunchServerOptions,
    'command' | 'args' | 'url'
  >,
): Promise<LaunchedServer> {
  if (!commandLine.includes('{port}'))
    throw new InvalidArgumentError(
      `the server command must say where it listens with {port}: ${commandLine}`,
    );
  const { model, lora, ...rest } = o;
  const port = await freePort();
  let line = commandLine
    .replaceAll('{port}', String(port))
    .replaceAll('{model}', shellQuote(model));
  let env = rest.env;
  if (lora) {
    const l = loraServerArgs(lora);
    const flags = l.args.map(shellQuote).join(' ');
    line = line.includes('{lora}') ? line.replaceAll('{lora}', flags) : `${line} ${flags}`;
    env = { ...l.env, ...env };
  } else line = line.replaceAll('{lora}', '');
  return launchServer({
    name: `'${commandLine}'`,
    ...rest,
    ...(env ? { env } : {}),
    command: 'sh',
    args: ['-c', line],
    url: `http://127.0.0.1:${port}`,
  });
}
