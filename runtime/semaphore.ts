/**
 * A counting semaphore, for bounding work in flight: agent episodes per engine
 * (`agents/episode-runner.ts`), an LLM judge's requests (`rewards/judge.ts`).
 *
 * @module
 */
import { InvalidArgumentError } from './errors.ts';

/** At most `permits` holders at once, waiters served in FIFO order. */
export class Semaphore {
  private free: number;
  private readonly waiters: (() => void)[] = [];

  constructor(permits: number) {
    if (!Number.isInteger(permits) || permits < 1)
      throw new InvalidArgumentError(`permits must be an integer >= 1, got ${permits}`);
    this.free = permits;
  }

  private held = 0;

  /** Holders right now. */
  get inUse(): number {
    return this.held;
  }

  /** Callers waiting for a permit. */
  get waiting(): number {
    return this.waiters.length;
  }

  /** Waits for a permit. Pair every `acquire` with one `release`. */
  async acquire(): Promise<void> {
    if (this.free > 0) {
      this.free--;
      this.held++;
      return;
    }
    await new Promise<void>((resolve) => this.waiters.push(resolve));
    this.held++;
  }

  release(): void {
    this.held--;
    const next = this.waiters.shift();
    if (next) next();
    else this.free++;
  }

  /** Runs `fn` holding a permit. */
  async with<T>(fn: () => Promise<T>): Promise<T> {
    await this.acquire();
    try {
      return await fn();
    } finally {
      this.release();
    }
  }
}
