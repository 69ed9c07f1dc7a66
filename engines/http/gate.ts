/**
 * A gate that requests pass before they are sent: closed for any of several reasons at once
 * (paused, updating weights, asleep), open when none holds.
 *
 * @module
 */

/** Waits callers while any reason holds the gate closed. */
export class RequestGate {
  private readonly reasons = new Set<string>();
  private waiters: Array<{ resolve: () => void; reject: (e: unknown) => void }> = [];
  private failure: unknown = null;

  /** Whether a caller passes at once. */
  get isOpen(): boolean {
    return this.reasons.size === 0 && this.failure === null;
  }

  /** Whether `reason` currently holds the gate. */
  has(reason: string): boolean {
    return this.reasons.has(reason);
  }

  close(reason: string): void {
    this.reasons.add(reason);
  }

  open(reason: string): void {
    this.reasons.delete(reason);
    if (this.isOpen) this.wake();
  }

  /** Fails every waiter and every later caller with `err` (used on close). */
  fail(err: unknown): void {
    this.failure = err;
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w.reject(err);
  }

  /** Resolves once the gate is open. */
  async pass(): Promise<void> {
    while (!this.isOpen) {
      if (this.failure !== null) throw this.failure;
      await new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
    }
  }

  private wake(): void {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w.resolve();
  }
}
