/**
 * How busy a rollout's engine is: a meter around its `generate` and `generateN` that adds up the
 * time at least one request is in flight and the request-milliseconds (the integral of requests
 * in flight over time). Beside the rollout's own busy time (episodes running) they tell how much
 * of an episode is the agent's own work (no request in flight: tools, environment, reward) and
 * how many requests the engine is given at once.
 *
 * @module
 */
import type { InferenceEngine } from '../engines/types.ts';

/** The meter's running totals. */
export interface EngineMeter {
  /** Milliseconds with at least one request in flight. */
  busyMs(): number;
  /** Request-milliseconds: each request's time in flight, summed. */
  requestMs(): number;
}

/**
 * Wraps `engine.generate` and `engine.generateN` in place (every holder of the engine, the
 * gateway included, is metered) and returns the meter.
 */
export function meterEngine(engine: InferenceEngine): EngineMeter {
  let inFlight = 0;
  let since = 0;
  let busy = 0;
  let requests = 0;
  const now = () => performance.now();
  const settle = (t: number): void => {
    if (inFlight > 0) {
      busy += t - since;
      requests += inFlight * (t - since);
    }
    since = t;
  };
  const metered =
    <A extends unknown[], R>(call: (...a: A) => Promise<R>) =>
    async (...a: A): Promise<R> => {
      settle(now());
      inFlight++;
      try {
        return await call(...a);
      } finally {
        settle(now());
        inFlight--;
      }
    };
  engine.generate = metered(engine.generate.bind(engine));
  engine.generateN = metered(engine.generateN.bind(engine));
  return {
    busyMs: () => (settle(now()), busy),
    requestMs: () => (settle(now()), requests),
  };
}
