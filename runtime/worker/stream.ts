/**
 * The worker's side of a streaming call: drives the generator a method returned, sending each
 * item to the caller as a `streamItem` as soon as it is produced. With backpressure `n > 0` the
 * generator is not resumed while `n` items are produced and not yet consumed (the caller acks
 * what it took). An error the generator throws becomes the last item; a cancelled call, or a
 * caller that went away, closes the generator (its `finally` blocks run).
 *
 * @module
 */
import { type CallContext, runInCall } from '../call-context.ts';
import { InvalidArgumentError, toWire } from '../errors.ts';
import type { Connection } from '../transport.ts';

/** One running stream, as the executor tracks it for acks. */
export interface StreamState {
  ack(consumed: number): void;
}

/** What `driveStream` needs from the executor. */
export interface StreamOptions {
  ctx: CallContext;
  /** The call's id, which its items name. */
  callId: string;
  /** The caller's connection: where items go. */
  sink: Connection;
  /** Items produced and not consumed before the generator waits (0: no limit). */
  backpressure: number;
  /** The executor's running streams (this one is added while it runs). */
  streams: Map<string, StreamState>;
  /** Turns what the generator threw into the error its caller sees. */
  wrap(e: unknown): unknown;
}

type AnyIterator = {
  next(): unknown;
  return?(value?: unknown): unknown;
};

/**
 * Sends every item of `out` (what the generator method returned) to the caller; resolves with
 * the number of items sent, an error item included.
 */
export async function driveStream(out: unknown, o: StreamOptions): Promise<number> {
  const { ctx, sink, backpressure } = o;
  const it = iteratorOf(out);
  if (!it) {
    throw new InvalidArgumentError(
      `'${ctx.method}' did not return a generator: a streaming call needs an async function* or function* method`,
      { context: { actorId: ctx.actorId, method: ctx.method } },
    );
  }
  const callId = o.callId;
  let consumed = 0;
  let wake: (() => void) | undefined;
  const resume = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  o.streams.set(callId, {
    ack(n) {
      if (n > consumed) consumed = n;
      resume();
    },
  });
  ctx.onCancel = resume;
  onSinkClose(sink, callId, resume);
  let i = 0;
  try {
    for (;;) {
      while (backpressure > 0 && i - consumed >= backpressure && !ctx.cancelled && !sink.closed)
        await new Promise<void>((r) => (wake = r));
      if (ctx.cancelled || sink.closed) {
        await runInCall(ctx, () => it.return?.(undefined));
        if (ctx.cancelled) throw ctx.error();
        return i;
      }
      let value: unknown;
      try {
        // Each step runs as the call, so the generator's body can read callSignal().
        const step = (await runInCall(ctx, () => it.next())) as IteratorResult<unknown>;
        if (step.done) return i;
        value = await step.value;
      } catch (e) {
        if (ctx.cancelled) throw ctx.error();
        sink.send({ type: 'streamItem', callId, index: i, error: toWire(o.wrap(e)) });
        return i + 1;
      }
      try {
        sink.send({ type: 'streamItem', callId, index: i, value });
      } catch (e) {
        // The item cannot be sent (it does not serialise): it fails there, and the stream ends.
        sink.send({ type: 'streamItem', callId, index: i, error: toWire(o.wrap(e)) });
        await runInCall(ctx, () => it.return?.(undefined));
        return i + 1;
      }
      i++;
    }
  } finally {
    o.streams.delete(callId);
    (sink.meta.streamWakers as Map<string, () => void> | undefined)?.delete(callId);
  }
}

function iteratorOf(out: unknown): AnyIterator | undefined {
  if (out === null || typeof out !== 'object') return undefined;
  const o = out as Record<symbol, unknown> & { next?: unknown };
  if (typeof o.next !== 'function') return undefined;
  if (typeof o[Symbol.asyncIterator] !== 'function' && typeof o[Symbol.iterator] !== 'function')
    return undefined;
  return out as AnyIterator;
}

/** Wakes the stream when its caller's connection closes (one close listener per connection). */
function onSinkClose(sink: Connection, callId: string, wake: () => void): void {
  let wakers = sink.meta.streamWakers as Map<string, () => void> | undefined;
  if (!wakers) {
    const w = new Map<string, () => void>();
    sink.meta.streamWakers = wakers = w;
    sink.onClose(() => {
      for (const fn of w.values()) fn();
    });
  }
  wakers.set(callId, wake);
}
