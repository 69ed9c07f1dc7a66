/**
 * Entry point of a concurrency group's own thread (`concurrencyGroups: { g: { thread: true } }`),
 * started by `group-thread.ts`. It constructs its own instance of the actor class from the same
 * constructor arguments, then runs the calls the worker's main thread posts, one message per
 * call, and posts back each result (or the error, in wire form). A call's `callSignal()` works
 * here as on the main thread; a cancel message aborts it.
 *
 * @module
 */
import { parentPort, workerData } from 'node:worker_threads';
import { CallContext, enterCall, exitCall } from '../call-context.ts';
import { isRuntimeError, toTaskError, toWire } from '../errors.ts';
import { isThenable } from './executor.ts';
import type { GroupThreadData, ToThread } from './group-thread.ts';
import { constructActor } from './load.ts';

const port = parentPort!;
const data = workerData as GroupThreadData;
const { actorId } = data;

const wireError = (e: unknown, method: string) =>
  toWire(isRuntimeError(e) ? e : toTaskError(e, { actorId, method }));

try {
  const lookup = await constructActor(data.spec, data.args, actorId);
  /** Async calls still running, by the id the main thread gave them (for cancel). */
  const running = new Map<number, CallContext>();
  const done = (id: number, method: string, value: unknown) => {
    try {
      port.postMessage({ t: 'done', id, value });
    } catch (e) {
      // The result cannot cross to the main thread (a function, a class the clone drops).
      port.postMessage({ t: 'error', id, error: wireError(e, method) });
    }
  };
  port.on('message', (m: ToThread) => {
    if (m.t === 'cancel') return running.get(m.id)?.cancel();
    const ctx = new CallContext(m.method, actorId);
    let r: unknown;
    const prev = enterCall(ctx);
    try {
      const { fn, self } = lookup(m.method);
      r = fn.apply(self, m.args);
    } catch (e) {
      port.postMessage({ t: 'error', id: m.id, error: wireError(e, m.method) });
      return;
    } finally {
      exitCall(prev);
    }
    if (!isThenable(r)) return done(m.id, m.method, r);
    running.set(m.id, ctx);
    Promise.resolve(r).then(
      (v) => {
        running.delete(m.id);
        done(m.id, m.method, v);
      },
      (e) => {
        running.delete(m.id);
        port.postMessage({ t: 'error', id: m.id, error: wireError(e, m.method) });
      },
    );
  });
  port.postMessage({ t: 'ready' });
} catch (e) {
  port.postMessage({ t: 'failed', error: toWire(e) });
}
