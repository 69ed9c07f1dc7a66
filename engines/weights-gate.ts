/**
 * The one readers–writer gate over an engine's weights. Readers (a generation step, a batch that
 * must not mix versions, an evaluation) hold the weights fixed and run together; a writer (a
 * weight update or publish) waits until no reader holds them and then holds them alone.
 *
 * Waiters are served in arrival order, a run of readers at once: once a writer waits, readers that
 * come after it queue behind it (so the next batch starts on the new weights, and a stream of
 * readers cannot starve a writer), and readers that came before a second writer go before it (so
 * a stream of writers cannot starve readers either). llama.cpp's engine and `train_ppo`'s async
 * loop both use it.
 *
 * @module
 */
import { RtjobError } from '../runtime/errors.ts';

/** A readers–writer gate; see the module comment for its order. */
export class WeightsGate {
  #readers = 0;
  #writing = false;
  /** Callers waiting, in arrival order. */
  #queue: { write: boolean; grant: () => void }[] = [];

  /** Whether a writer holds the gate. */
  get writing(): boolean {
    return this.#writing;
  }

  /** How many readers hold the gate. */
  get readers(): number {
    return this.#readers;
  }

  /** Waits until no writer holds or waits ahead of the caller, then holds the weights fixed. */
  async read(): Promise<void> {
    if (!this.#writing && this.#queue.length === 0) {
      this.#readers++;
      return;
    }
    await new Promise<void>((grant) => this.#queue.push({ write: false, grant }));
  }

  /** Waits until nobody holds the gate and nobody waits ahead of the caller, then holds it alone. */
  async write(): Promise<void> {
    if (!this.#writing && this.#readers === 0 && this.#queue.length === 0) {
      this.#writing = true;
      return;
    }
    await new Promise<void>((grant) => this.#queue.push({ write: true, grant }));
  }

  /**
   * Releases what the caller holds: the write, when a writer holds the gate (no reader can then),
   * else one read. Releasing a gate nobody holds is a bug in the caller, and throws.
   */
  done(): void {
    if (this.#writing) this.#writing = false;
    else if (this.#readers > 0) this.#readers--;
    else throw new RtjobError('GATE_NOT_HELD', 'WeightsGate.done() without a read or a write held');
    if (this.#readers > 0) return;
    const first = this.#queue[0];
    if (first?.write) {
      this.#queue.shift();
      this.#writing = true;
      first.grant();
      return;
    }
    // The run of readers at the head of the queue, up to the next writer, go in together.
    while (this.#queue[0] && !this.#queue[0].write) {
      this.#readers++;
      this.#queue.shift()!.grant();
    }
  }
}
