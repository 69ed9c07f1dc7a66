/**
 * The HTTP engines stream when a request has `onTokens`: against both fake servers, tokens reach
 * the listener while the server is still generating, a request without a listener is not
 * streamed, and a stream that fails part way continues from the tokens already told (never
 * re-sent from scratch) or fails with the server's error.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

import type { RemoteEngine } from '../../engines/http/remote-engine.ts';
import { isEngineError } from '../../engines/http/errors.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import { VllmEngine } from '../../engines/vllm/index.ts';
import type { FakeServer } from '../fakes/fake-server.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import type {
  GeneratedSequence,
  SamplingRequest,
  TokenGenerator,
} from '../fakes/token-generator.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import { closedAfterEach, prompt, testGenerator } from './fake-fixtures.ts';

/**
 * Generates with {@link testGenerator}; the next request it is armed for stops before token
 * `at + 1`, and either waits for `release()` (for at most 10 s, then sets `heldInVain`) or fails.
 */
class TrappingGenerator implements TokenGenerator {
  private readonly inner = testGenerator(0);
  readonly eosTokenId = this.inner.eosTokenId;
  private trap: { at: number; action: 'hold' | 'fail' } | null = null;
  heldInVain = false;
  private released!: () => void;
  private readonly releasedP = new Promise<void>((r) => (this.released = r));

  arm(at: number, action: 'hold' | 'fail'): void {
    this.trap = { at, action };
  }

  release(): void {
    this.released();
  }

  decode(ids: number[]): string {
    return this.inner.decode(ids);
  }

  loadWeights(path: string): Promise<void> {
    return this.inner.loadWeights(path);
  }

  generate(req: SamplingRequest): Promise<GeneratedSequence> {
    const trap = this.trap;
    this.trap = null;
    let made = 0;
    return this.inner.generate({
      ...req,
      hold: async () => {
        await req.hold();
        if (trap && made++ === trap.at) {
          if (trap.action === 'fail') throw new Error('the GPU fell over');
          let timer: NodeJS.Timeout | undefined;
          const inVain = new Promise<void>(
            (r) => (timer = setTimeout(() => ((this.heldInVain = true), r()), 10_000)),
          );
          await Promise.race([this.releasedP, inVain]);
          clearTimeout(timer);
        }
      },
    });
  }
}

const servers: Array<{
  name: string;
  start: (g: TokenGenerator) => Promise<FakeServer>;
  engine: (url: string) => RemoteEngine;
  streamed: (body: unknown) => unknown;
}> = [
  {
    name: 'sglang',
    start: (generator) => FakeSglangServer.start({ generator }),
    engine: (url) => new SglangEngine({ urls: [url], retryBaseDelayMs: 1 }),
    streamed: (b) => (b as { stream?: unknown }).stream,
  },
  {
    name: 'sglang --incremental-streaming-output',
    start: (generator) => FakeSglangServer.start({ generator, incrementalStreamingOutput: true }),
    engine: (url) =>
      new SglangEngine({ urls: [url], retryBaseDelayMs: 1, incrementalStreamingOutput: true }),
    streamed: (b) => (b as { stream?: unknown }).stream,
  },
  {
    name: 'vllm',
    start: (generator) => FakeVllmServer.start({ generator }),
    engine: (url) => new VllmEngine({ urls: [url], retryBaseDelayMs: 1 }),
    streamed: (b) => (b as { stream?: unknown }).stream,
  },
];

function inputOf(body: unknown): number[] {
  const b = body as { input_ids?: number[]; prompt?: number[] };
  return (b.input_ids ?? b.prompt)!;
}

for (const s of servers) {
  const test = suite(`${s.name} engine streaming (fake ${s.name} server)`);
  const own = closedAfterEach(test);

  test('tokens reach onTokens while the server is still generating', async () => {
    const gen = new TrappingGenerator();
    const fake = own(await s.start(gen));
    const engine = own(s.engine(fake.url));
    // The server stops after 3 tokens until the client has been told them: a proxy that
    // answered in one burst would never release it.
    gen.arm(3, 'hold');
    const told: number[] = [];
    let calls = 0;
    const r = await engine.generate({
      inputIds: prompt,
      gconfig: { maxNewTokens: 12 },
      onTokens: (d) => {
        calls++;
        told.push(...d.tokens);
        if (told.length >= 3) gen.release();
      },
    });
    assert.is(gen.heldInVain, false, 'the first tokens arrived while the server held the rest');
    assert.equal(told, r.outputTokens);
    assert.is(r.outputTokens.length, 12);
    assert.ok(calls > 1, `onTokens called ${calls} times`);
    assert.is(s.streamed(fake.generateBodies.at(-1)), true);
  });

  test('n samples stream each to its own index', async () => {
    const fake = own(await s.start(new TrappingGenerator()));
    const engine = own(s.engine(fake.url));
    const bySample: number[][] = [[], [], []];
    let calls = 0;
    const rs = await engine.generateN({
      inputIds: prompt,
      gconfig: { maxNewTokens: 5, n: 3 },
      onTokens: (d) => (calls++, bySample[d.sample]!.push(...d.tokens)),
    });
    assert.equal(
      bySample,
      rs.map((x) => x.outputTokens),
    );
    assert.ok(calls >= 15, `one call per streamed token (${calls})`);
  });

  test('a request without onTokens is not streamed', async () => {
    const fake = own(await s.start(new TrappingGenerator()));
    const engine = own(s.engine(fake.url));
    const r = await engine.generate({ inputIds: prompt, gconfig: { maxNewTokens: 4 } });
    assert.is(r.outputTokens.length, 4);
    assert.is(s.streamed(fake.generateBodies.at(-1)), false);
  });

  test('a stream that fails part way continues from the tokens told', async () => {
    const gen = new TrappingGenerator();
    const fake = own(await s.start(gen));
    const engine = own(s.engine(fake.url));
    gen.arm(3, 'fail');
    const told: number[] = [];
    const r = await engine.generate({
      inputIds: prompt,
      gconfig: { maxNewTokens: 10 },
      onTokens: (d) => told.push(...d.tokens),
    });
    assert.equal(told, r.outputTokens, 'every token told exactly once');
    assert.is(r.outputTokens.length, 10);
    assert.is(fake.stats.generateRequests, 2);
    const [first, second] = fake.generateBodies.slice(-2);
    assert.equal(inputOf(first), prompt);
    assert.equal(
      inputOf(second),
      prompt.concat(r.outputTokens.slice(0, 3)),
      'resumed, not re-sent',
    );
  });

  test('a stream that fails before any token is retried like any request', async () => {
    const gen = new TrappingGenerator();
    const fake = own(await s.start(gen));
    const engine = own(s.engine(fake.url));
    gen.arm(0, 'fail');
    const told: number[] = [];
    const r = await engine.generate({
      inputIds: prompt,
      gconfig: { maxNewTokens: 6 },
      onTokens: (d) => told.push(...d.tokens),
    });
    assert.equal(told, r.outputTokens);
    assert.is(fake.stats.generateRequests, 2);
    assert.equal(inputOf(fake.generateBodies.at(-1)), prompt);
  });

  test('a refused streamed request fails with the same EngineError as a plain one', async () => {
    const fake = own(await s.start(new TrappingGenerator()));
    const engine = own(s.engine(fake.url));
    const tooLong = Array.from({ length: 5000 }, () => 3);
    const errs = await Promise.all(
      [undefined, () => undefined].map((onTokens) =>
        engine
          .generate({ inputIds: tooLong, gconfig: { maxNewTokens: 4 }, onTokens })
          .then(() => null)
          .catch((e: unknown) => e),
      ),
    );
    for (const e of errs) {
      assert.ok(isEngineError(e), String(e));
      assert.is(e.code, 'HTTP_STATUS');
      assert.is(e.status, 400);
    }
  });

  test.run();
}
