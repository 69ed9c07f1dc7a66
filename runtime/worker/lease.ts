/**
 * Fencing for a worker: it serves calls only while it holds a lease from the head, renewed every
 * third of the lease (half the node heartbeat timeout). A worker cut off from the head stops
 * starting calls before the head can declare its node dead and start a new incarnation
 * elsewhere, so a replaced incarnation never runs a call after its replacement exists. When the
 * link returns, the first renewal either restores the lease (calls held meanwhile run, in order)
 * or is refused because the incarnation was replaced, and the worker exits without running them.
 *
 * A head that closes or crashes (its connection ends, rather than going silent) does not fence:
 * nobody can replace the incarnation while no head runs, and calls keep flowing through a head
 * restart.
 *
 * @module
 */
import { isRtjobError } from '../errors.ts';
import { logger } from '../log.ts';
import type { Runtime } from '../client/runtime.ts';

const log = logger('worker');

/** What the lease pauses and resumes. */
export interface Fenceable {
  pause(): void;
  resume(): void;
}

/** This incarnation's lease with the head. */
export class Lease {
  private validUntilMs: number;
  private renewEveryMs = 1000;
  private fenced = false;
  private lastRenewMs = 0;
  private renewing = false;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly rt: Runtime,
    private readonly actorId: string,
    private readonly incarnation: number,
    private readonly target: Fenceable,
    /** Called when the head says this incarnation was replaced; the worker exits. */
    private readonly onReplaced: (why: string) => void,
  ) {
    // Until the first renewal answers: the head just accepted `actorReady`.
    this.validUntilMs = Date.now() + 2000;
    this.timer = setInterval(() => this.tick(), 100);
    this.timer.unref();
    this.renew();
  }

  /** Whether calls may start now. */
  get valid(): boolean {
    return !this.fenced;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /**
   * Fences now if the lease ran out while the head is silent. Called for every call that
   * arrives, so a call read right after a stall never starts before the timer noticed.
   */
  check(): void {
    if (this.fenced) return;
    const now = Date.now();
    if (now <= this.validUntilMs || !(this.rt.headSilent || !this.rt.head.closed)) return;
    {
      this.fenced = true;
      this.target.pause();
      log.warn(
        `actor ${this.actorId} incarnation ${this.incarnation}: no word from the head for ${now - this.lastRenewMs} ms; ` +
          'holding calls until it confirms this incarnation',
      );
    }
  }

  private tick(): void {
    this.check();
    if (Date.now() - this.lastRenewMs >= this.renewEveryMs) this.renew();
  }

  private renew(): void {
    if (this.renewing || this.rt.head.closed) return;
    this.renewing = true;
    const sentMs = Date.now();
    this.lastRenewMs = sentMs;
    this.rt.head
      .request({ type: 'renewLease', actorId: this.actorId, incarnation: this.incarnation })
      .then(
        ({ leaseMs }) => {
          this.validUntilMs = sentMs + leaseMs;
          this.renewEveryMs = Math.max(50, Math.floor(leaseMs / 3));
          if (this.fenced) {
            this.fenced = false;
            log.warn(
              `actor ${this.actorId} incarnation ${this.incarnation}: the head confirmed it; serving again`,
            );
            this.target.resume();
          }
        },
        (e: unknown) => {
          if (isRtjobError(e, 'NOT_FOUND')) this.onReplaced((e as Error).message);
          // Anything else (the connection dropped): the lease runs out on its own.
        },
      )
      .finally(() => (this.renewing = false));
  }
}
