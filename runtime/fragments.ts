/**
 * Reassembly of fragmented messages on the receiving side of a connection, bounded: memory is
 * taken for bytes that arrived (never for a size a header declares), per connection and per
 * process, and a connection may be receiving only so many messages at once. The transport
 * closes a connection whose peer goes over (see `transport.ts`).
 *
 * @module
 */
import type { Fragment } from './protocol.ts';

/** Fragmented messages one connection may be receiving at once (a sender interleaves 16). */
export const maxAssemblies = 64;

/** Bytes of partly received messages across every connection of this process. */
let processBytesInFlight = 0;
let processBudgetBytes = 4 * 1024 * 1024 * 1024;

/** Sets the process-wide budget for partly received messages (default 4 GiB). */
export function setProcessFragmentBudget(bytes: number): void {
  processBudgetBytes = bytes;
}

/** Bytes of partly received fragmented messages this process holds now. */
export function fragmentBytesInFlight(): number {
  return processBytesInFlight;
}

interface Assembly {
  chunks: Buffer[];
  total: number;
  received: number;
}

/** What a fragment did: completed a message, needs more, or broke a rule (close the connection). */
export type FragmentOutcome = { readonly done: Buffer } | { readonly error: string } | undefined;

/** One connection's messages being reassembled. */
export class Reassembly {
  private readonly assemblies = new Map<number, Assembly>();
  private bytes = 0;

  constructor(
    private readonly maxMessageBytes: number,
    private readonly maxBytesInFlight: number,
  ) {}

  /** Takes one fragment: its header and the raw frame that followed it. */
  accept(f: Fragment, data: Buffer): FragmentOutcome {
    if (data.length !== f.bytes) return { error: 'fragment data does not match its header' };
    if (f.total > this.maxMessageBytes || f.offset + data.length > f.total)
      return { error: 'malformed fragment' };
    let a = this.assemblies.get(f.fid);
    if (!a) {
      if (f.offset !== 0) return { error: 'fragment out of order' };
      if (this.assemblies.size >= maxAssemblies)
        return { error: `more than ${maxAssemblies} fragmented messages at once` };
      a = { chunks: [], total: f.total, received: 0 };
      this.assemblies.set(f.fid, a);
    } else if (a.total !== f.total || f.offset !== a.received) {
      return { error: 'fragment does not continue its message' };
    }
    const n = data.length;
    if (this.bytes + n > this.maxBytesInFlight) {
      return { error: `fragments in flight over this connection's ${this.maxBytesInFlight} bytes` };
    }
    if (processBytesInFlight + n > processBudgetBytes) {
      return { error: `fragments in flight over this process's ${processBudgetBytes} bytes` };
    }
    this.bytes += n;
    processBytesInFlight += n;
    a.chunks.push(data);
    a.received += n;
    if (a.received < a.total) return undefined;
    this.assemblies.delete(f.fid);
    this.bytes -= a.received;
    processBytesInFlight -= a.received;
    return { done: a.chunks.length === 1 ? a.chunks[0]! : Buffer.concat(a.chunks, a.total) };
  }

  /** Drops every partial message (the connection closed). */
  clear(): void {
    processBytesInFlight -= this.bytes;
    this.bytes = 0;
    this.assemblies.clear();
  }
}
