/**
 * Drives the real `rtjob` CLI in a temporary HOME, so tests never touch the user's ~/.rtjob and
 * always clean up the processes they started.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const binPath = fileURLToPath(new URL('../../cli/bin.js', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A sandbox: its own HOME (and so its own ~/.rtjob), and a way to run `rtjob` in it. */
export class Sandbox {
  readonly home = mkdtempSync(join(tmpdir(), 'rtjob-test-'));

  /** `env`: extra environment for every command run in this sandbox. */
  constructor(readonly env: Record<string, string> = {}) {}

  run(
    args: string[],
    opts: { env?: Record<string, string>; cwd?: string; timeoutMs?: number } = {},
  ): Promise<CliResult> {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [binPath, ...args], {
        cwd: opts.cwd ?? this.home,
        env: {
          ...process.env,
          HOME: this.home,
          RTJOB_HOME: join(this.home, '.rtjob'),
          ...this.env,
          ...opts.env,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(
          new Error(`rtjob ${args.join(' ')} timed out\nstdout: ${stdout}\nstderr: ${stderr}`),
        );
      }, opts.timeoutMs ?? 60_000);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });
  }

  clusterFile(): {
    address: string;
    dashboardUrl: string;
    token: string;
    sessionDir: string;
    pids: number[];
    /** The head daemon's. */
    headPid?: number;
  } {
    return JSON.parse(readFileSync(join(this.home, '.rtjob', 'cluster.json'), 'utf8'));
  }

  /** Starts a head on free ports. */
  async startHead(extra: string[] = []): Promise<CliResult> {
    const r = await this.run(['start', '--head', '--port', '0', '--dashboard-port', '0', ...extra]);
    if (r.code !== 0) throw new Error(`start --head failed: ${r.stderr}${r.stdout}`);
    return r;
  }

  /** `rtjob stop`, then removes the sandbox. */
  async cleanup(): Promise<void> {
    let pids: number[] = [];
    try {
      pids = this.clusterFile().pids;
    } catch {
      // no cluster
    }
    await this.run(['stop']).catch(() => undefined);
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone, as it should be
      }
    }
    rmSync(this.home, { recursive: true, force: true });
  }
}

export { pidAlive } from '../../runtime/pid.ts';

/** Polls `check` until it returns a value other than undefined, or throws after `timeoutMs`. */
export async function until<T>(
  what: string,
  check: () => T | undefined | Promise<T | undefined>,
  timeoutMs = 20_000,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** GET/POST the head's API with the sandbox's token. */
export async function apiCall<T>(
  sb: Sandbox,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: T }> {
  const { dashboardUrl, token } = sb.clusterFile();
  const res = await fetch(`${dashboardUrl}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body ? { 'content-type': 'application/json' } : {}),
    },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // text
  }
  return { status: res.status, body: parsed as T };
}
