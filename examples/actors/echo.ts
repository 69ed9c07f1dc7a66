/**
 * A minimal actor and task module: the runtime benchmark drives it, and it shows the shape of
 * an actor module (a plain exported class; methods may be sync or async).
 */
import { get, type ActorHandle } from 'rtjob';

export class Echo {
  calls = 0;

  noop(): void {
    this.calls++;
  }

  async asyncNoop(): Promise<void> {
    this.calls++;
  }

  echo<T>(v: T): T {
    return v;
  }

  byteLength(a: Float32Array): number {
    return a.byteLength;
  }

  makeArray(n: number): Float32Array {
    return new Float32Array(n);
  }

  /** CPU milliseconds this worker process has used (user + system). */
  cpuMs(): number {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1000;
  }

  /** Calls `noop` on each target `n` times, pipelined; returns the number of calls made. */
  async callMany(targets: ActorHandle<Echo>[], n: number): Promise<number> {
    const refs = [];
    for (let i = 0; i < n; i++) refs.push(targets[i % targets.length]!.noop.remote());
    await get(refs);
    return n;
  }
}

/** A task that does nothing. */
export function noop(): void {}
