/**
 * Starts the Python fake of SGLang's or vLLM's in-memory weight routes
 * (`weight_sync_server.py`, Debian's python3-torch) and reads what it holds: every weight's
 * SHA-256, the version, the updates it committed, the errors it answered.
 *
 * @module
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { httpCall } from '../../engines/http/http-call.ts';

const script = fileURLToPath(new URL('./weight_sync_server.py', import.meta.url));

/** Options of {@link startWeightSyncFake}. */
export interface WeightSyncFakeOptions {
  kind: 'sglang' | 'vllm';
  /** An HF directory whose model.safetensors the server starts with. */
  model?: string;
  /** A fake server that answers every other route (generation, pause, health). */
  upstream?: string;
  /** Updates are never received: their handler waits until the server stops. */
  hang?: boolean;
  /** The server's torch.distributed timeout. @default 60 */
  timeoutS?: number;
}

/** What the fake holds. */
export interface WeightSyncFakeState {
  version: string | null;
  updates: number;
  errors: string[];
  digests: Record<string, string>;
}

/** A running Python fake. */
export interface WeightSyncFake {
  readonly url: string;
  state(): Promise<WeightSyncFakeState>;
  /** Stops it (closing stdin, then a kill if it lingers). */
  close(): Promise<void>;
}

/** Starts the fake; resolves once it serves. */
export async function startWeightSyncFake(o: WeightSyncFakeOptions): Promise<WeightSyncFake> {
  const args = [script, '--kind', o.kind, '--timeout-s', String(o.timeoutS ?? 60)];
  if (o.model) args.push('--model', o.model);
  if (o.upstream) args.push('--upstream', o.upstream);
  if (o.hang) args.push('--hang');
  const child: ChildProcess = spawn('/usr/bin/python3', args, {
    // Gloo binds the loopback interface, as rank 0 does.
    env: { ...process.env, GLOO_SOCKET_IFNAME: 'lo' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening on (\S+)\n/.exec(out);
      if (m) resolve(m[1]!);
    });
    child.on('exit', (code) => reject(new Error(`weight sync fake exited (${code}): ${err}`)));
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    url,
    state: async () =>
      (await httpCall(`${url}/fake/state`, undefined, {
        timeoutMs: 10_000,
      })) as WeightSyncFakeState,
    async close() {
      if (child.exitCode !== null) return;
      child.stdin!.end();
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(t);
    },
  };
}
