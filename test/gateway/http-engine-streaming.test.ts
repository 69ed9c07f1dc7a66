/**
 * The gateway streams through the HTTP engines: an `openai` client's streamed chat completion,
 * served by the SGLang or vLLM proxy in front of a fake server, gets its first content while the
 * server is provably still generating (it holds the rest until the client has read it).
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

import type { RemoteEngine } from '../../engines/http/remote-engine.ts';
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
import { compactToolTemplate, openaiClient, startGateway, tokenizerWith } from './helpers.ts';

const tok = tokenizerWith(compactToolTemplate);
const first = 'Hello world.';
const answer = `${first} Streamed through a server.`;

/**
 * Answers every request with `answer` and the end token; after the tokens of `first` it waits
 * for `release()` (at most 10 s, then sets `heldInVain`).
 */
class ScriptedGenerator implements TokenGenerator {
  readonly eosTokenId = tok.eosTokenId!;
  heldInVain = false;
  private released!: () => void;
  private readonly releasedP = new Promise<void>((r) => (this.released = r));

  release(): void {
    this.released();
  }

  decode(ids: number[]): string {
    return tok.decode(ids, { skipSpecialTokens: false });
  }

  async loadWeights(): Promise<void> {}

  async generate(req: SamplingRequest): Promise<GeneratedSequence> {
    const ids = [...tok.encode(answer), this.eosTokenId];
    const holdAt = tok.encode(first).length;
    const out: GeneratedSequence = { tokens: [], logprobs: [], rawLogprobs: [], finish: 'length' };
    for (const id of ids) {
      await req.hold();
      if (out.tokens.length === holdAt) {
        let timer: NodeJS.Timeout | undefined;
        const inVain = new Promise<void>(
          (r) => (timer = setTimeout(() => ((this.heldInVain = true), r()), 10_000)),
        );
        await Promise.race([this.releasedP, inVain]);
        clearTimeout(timer);
      }
      if (req.signal.aborted) return { ...out, finish: 'abort' };
      out.tokens.push(id);
      out.logprobs.push(-0.5);
      out.rawLogprobs!.push(-0.5);
      req.onToken(out);
    }
    return { ...out, finish: 'stop', matched: this.eosTokenId };
  }
}

const kinds: Array<{
  name: string;
  start: (g: TokenGenerator) => Promise<FakeServer>;
  engine: (url: string) => RemoteEngine;
}> = [
  {
    name: 'sglang',
    start: (generator) => FakeSglangServer.start({ generator }),
    engine: (url) => new SglangEngine({ urls: [url] }),
  },
  {
    name: 'vllm',
    start: (generator) => FakeVllmServer.start({ generator }),
    engine: (url) => new VllmEngine({ urls: [url] }),
  },
];

for (const k of kinds) {
  const test = suite(`gateway streaming through the ${k.name} engine`);

  test('chat completion content arrives while the server is still generating', async () => {
    const gen = new ScriptedGenerator();
    const fake = await k.start(gen);
    const engine = k.engine(fake.url);
    const gw = await startGateway({ engine, tokenizer: tok });
    try {
      const client = openaiClient(gw, gw.openSession().apiKey);
      const stream = await client.chat.completions.create({
        model: 'tiny',
        messages: [{ role: 'user', content: 'say hello' }],
        stream: true,
      });
      let content = '';
      let finish: string | null = null;
      for await (const chunk of stream) {
        const c = chunk.choices[0];
        content += c?.delta.content ?? '';
        finish = c?.finish_reason ?? finish;
        if (content.length > 0) gen.release();
      }
      assert.is(gen.heldInVain, false, 'content left the gateway while the server held the rest');
      assert.is(content, answer);
      assert.is(finish, 'stop');
    } finally {
      await gw.close();
      await engine.close();
      await fake.close();
    }
  });

  test.run();
}
