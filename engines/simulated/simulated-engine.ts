/**
 * An `InferenceEngine` with no model: it answers with tokens from a user function after a chosen
 * per-token delay. Used by the orchestration benchmark (how much of the ideal throughput the
 * rollout machinery achieves) and by tests of the agent executors, where what matters is the
 * token bookkeeping, not the text.
 *
 * @module
 */
import type {
  GenerateRequest,
  GenerateResult,
  InferenceEngine,
  PauseOptions,
  WeightUpdate,
} from '../types.ts';
import { seededRandom } from '../../model/sampling.ts';
import { InvalidArgumentError } from '../../runtime/errors.ts';

/** Settings of a `SimulatedEngine`. */
export interface SimulatedEngineOptions {
  /** Tokens to answer `inputIds` with. @default one token, 1 */
  respond?: (inputIds: number[], req: GenerateRequest) => number[];
  /** Delay per generated token in milliseconds; 0 answers on the next tick. @default 0 */
  tokenLatencyMs?: number;
  /** Logprob reported for each token. @default -1 */
  logprob?: number;
}

/** A model-free engine that still tags tokens with versions and honours pause/abort. */
export class SimulatedEngine implements InferenceEngine {
  readonly kind = 'simulated';
  private version = 0;
  private paused = false;
  private resumeWaiters: (() => void)[] = [];
  private aborters = new Set<() => void>();
  private readonly o: Required<SimulatedEngineOptions>;
  /** Requests served, for tests and the benchmark. */
  requests = 0;
  /** Tokens generated. */
  tokens = 0;

  constructor(o: SimulatedEngineOptions = {}) {
    this.o = { respond: () => [1], tokenLatencyMs: 0, logprob: -1, ...o };
  }

  async generate(req: GenerateRequest): Promise<GenerateResult> {
    if ((req.gconfig?.n ?? 1) !== 1)
      throw new InvalidArgumentError('generate takes n = 1; use generateN');
    const started = Date.now();
    while (this.paused) await new Promise<void>((r) => this.resumeWaiters.push(r));
    this.requests++;
    const want = this.o.respond(req.inputIds, req);
    const max = req.gconfig?.maxNewTokens ?? 256;
    const out = want.slice(0, max);
    const version = this.version;
    let produced = out;
    let aborted = false;
    if (this.o.tokenLatencyMs > 0 && out.length > 0) {
      const totalMs = this.o.tokenLatencyMs * out.length;
      aborted = await new Promise<boolean>((resolve) => {
        const abort = (): void => {
          clearTimeout(timer);
          this.aborters.delete(abort);
          resolve(true);
        };
        const timer = setTimeout(() => {
          this.aborters.delete(abort);
          resolve(false);
        }, totalMs);
        this.aborters.add(abort);
      });
      if (aborted) {
        const done = Math.floor((Date.now() - started) / this.o.tokenLatencyMs);
        produced = out.slice(0, Math.min(out.length, done));
      }
    } else {
      await new Promise<void>((r) => setImmediate(r));
    }
    this.tokens += produced.length;
    // Told one token at a time, as a decoding engine would.
    produced.forEach((t) => req.onTokens?.({ sample: 0, tokens: [t], logprobs: [this.o.logprob] }));
    return {
      outputTokens: produced,
      outputLogprobs: produced.map(() => this.o.logprob),
      outputVersions: produced.map(() => version),
      stopReason: aborted ? 'abort' : produced.length < want.length ? 'length' : 'stop',
      latencyMs: Date.now() - started,
    };
  }

  async generateN(req: GenerateRequest): Promise<GenerateResult[]> {
    const n = req.gconfig?.n ?? 1;
    return Promise.all(
      Array.from({ length: n }, (_, i) =>
        this.generate({
          ...req,
          gconfig: { ...req.gconfig, n: 1 },
          ...(req.onTokens ? { onTokens: (d) => req.onTokens!({ ...d, sample: i }) } : {}),
        }),
      ),
    );
  }

  async updateWeights(_update: WeightUpdate, version: number): Promise<void> {
    this.version = version;
  }

  getVersion(): number {
    return this.version;
  }

  async pause(opts: PauseOptions = {}): Promise<void> {
    this.paused = true;
    if ((opts.mode ?? 'abort') === 'abort') for (const a of [...this.aborters]) a();
  }

  async resume(): Promise<void> {
    this.paused = false;
    const w = this.resumeWaiters;
    this.resumeWaiters = [];
    for (const r of w) r();
  }

  async sleep(): Promise<void> {}
  async wakeUp(): Promise<void> {}
  async close(): Promise<void> {
    await this.pause();
  }
}

/**
 * A long-tailed response length distribution for the simulated engine: lognormal around
 * `medianTokens` with spread `sigma`, capped by the generation limit, at `tokenLatencyMs` per token.
 */
export interface SimulatedLengths {
  tokenLatencyMs: number;
  medianTokens: number;
  /** @default 1 */
  sigma?: number;
  /** @default 0 */
  seed?: number;
}

/** A simulated engine answering with lengths drawn from `o` (seeded; token ids are filler). */
export function simulatedEngine(o: SimulatedLengths): SimulatedEngine {
  const rand = seededRandom(o.seed ?? 0);
  const sigma = o.sigma ?? 1;
  return new SimulatedEngine({
    tokenLatencyMs: o.tokenLatencyMs,
    respond: () => {
      // Box–Muller normal → lognormal length.
      const z = Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
      const n = Math.max(1, Math.round(o.medianTokens * Math.exp(sigma * z)));
      return Array.from({ length: n }, (_, i) => 5 + (i % 10));
    },
  });
}
