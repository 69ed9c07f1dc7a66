import { test } from 'uvu';
import * as assert from 'uvu/assert';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import type { GenerateRequest } from '../../engines/types.ts';
import {
  compactToolTemplate,
  openaiClient,
  scriptedEngine,
  startGateway,
  tokenizerWith,
} from './helpers.ts';

// Retries and aborts never leave a dangling completion in a trajectory. The official SDKs retry a
// timed-out request (`x-stainless-retry-count` > 0); the engine here stalls a chosen attempt until
// the retry has arrived, so the first attempt is still generating when its retry starts.
const tok = tokenizerWith(compactToolTemplate);
const meta = { groupId: 'g', promptIndex: 0 };

/** An engine whose `stallOn`-th call waits for the next call; answers are numbered by call. */
function stallingEngine(stallOn: number) {
  let calls = 0;
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let stalledDone!: () => void;
  const stalled = new Promise<void>((resolve) => (stalledDone = resolve));
  const inner = scriptedEngine(tok, (_p, req) => `answer${(req as { call?: number }).call}`);
  return {
    stalled,
    engine: {
      generate: async (req: GenerateRequest) => {
        const call = ++calls;
        if (call === stallOn) {
          await held;
          const r = await inner.generate({ ...req, call } as GenerateRequest);
          stalledDone();
          return r;
        }
        if (call === stallOn + 1) release();
        return inner.generate({ ...req, call } as GenerateRequest);
      },
      generateN: inner.generateN.bind(inner),
      getVersion: () => 0,
    },
  };
}

function trained(t: { inputIds: number[]; lossMask: number[] }): string {
  return tok.decode(
    t.inputIds.filter((_, i) => t.lossMask[i] === 1),
    { skipSpecialTokens: false },
  );
}

/** Lets the stalled request finish recording (it records right after its engine call returns). */
async function settled(stalled: Promise<void>): Promise<void> {
  await stalled;
  await new Promise((resolve) => setImmediate(resolve));
}

test('openai client: a turn that times out and is retried stays one trajectory; the lost attempt is kept as aborted', async () => {
  const { engine, stalled } = stallingEngine(2);
  const gw = await startGateway({ engine, tokenizer: tok });
  try {
    const s = gw.openSession();
    const client = new OpenAI({
      baseURL: gw.baseURL,
      apiKey: s.apiKey,
      timeout: 300,
      maxRetries: 1,
    });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'one' }];
    const ask = async () => {
      const r = await client.chat.completions.create({ model: 'tiny', messages });
      const content = r.choices[0]!.message.content!;
      messages.push({ role: 'assistant', content });
      return content;
    };
    assert.is(await ask(), 'answer1');
    messages.push({ role: 'user', content: 'two' });
    // Attempt 1 (engine call 2) stalls past the timeout; the SDK's retry is call 3.
    assert.is(await ask(), 'answer3');
    messages.push({ role: 'user', content: 'three' });
    assert.is(await ask(), 'answer4');
    await settled(stalled);
    const st = s.session.stats;
    assert.is(st.trajectories, 1);
    assert.is(st.aborted, 1);
    assert.equal(st.breaks, []);
    const [t] = s.session.trajectories(1, meta);
    assert.is(trained(t!), 'answer1<|end|>answer3<|end|>answer4<|end|>');
    // The attempt no client saw is kept with its tokens and versions, apart from training.
    const [lost] = s.session.aborted;
    assert.is(tok.decode(lost!.outputTokens, { skipSpecialTokens: false }), 'answer2<|end|>');
    assert.is(lost!.versions.length, lost!.outputTokens.length);
    assert.is(lost!.logprobs.length, lost!.outputTokens.length);
  } finally {
    await gw.close();
  }
});

test('@anthropic-ai/sdk: a retry that arrives while the first attempt is still connected supersedes it', async () => {
  const { engine, stalled } = stallingEngine(2);
  const gw = await startGateway({ engine, tokenizer: tok });
  try {
    const s = gw.openSession();
    const client = new Anthropic({ baseURL: gw.baseURL, apiKey: s.apiKey, maxRetries: 0 });
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'one' }];
    const first = await client.messages.create({ model: 'tiny', max_tokens: 50, messages });
    messages.push({ role: 'assistant', content: first.content }, { role: 'user', content: 'two' });
    const body = { model: 'tiny', max_tokens: 50, messages };
    // Attempt 1 stays connected (its client has not given up yet), stalled in the engine.
    const attempt1 = fetch(`${gw.baseURL}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': s.apiKey },
      body: JSON.stringify(body),
    });
    const retry = await client.messages.create(body, {
      headers: { 'x-stainless-retry-count': '1' },
    });
    assert.equal(retry.content, [{ type: 'text', text: 'answer3' }]);
    const late = (await (await attempt1).json()) as Anthropic.Message;
    assert.equal(late.content, [{ type: 'text', text: 'answer2' }]);
    await settled(stalled);
    const st = s.session.stats;
    assert.is(st.trajectories, 1);
    assert.is(st.aborted, 1);
    const [t] = s.session.trajectories(1, meta);
    assert.is(trained(t!), 'answer1<|end|>answer3<|end|>');
  } finally {
    await gw.close();
  }
});

test('a retry of a turn whose answer was recorded but lost on the way replaces it', async () => {
  const { engine } = stallingEngine(0);
  const gw = await startGateway({ engine, tokenizer: tok });
  try {
    const s = gw.openSession();
    const client = openaiClient(gw, s.apiKey);
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'one' }];
    const r1 = await client.chat.completions.create({ model: 'tiny', messages });
    messages.push(
      { role: 'assistant', content: r1.choices[0]!.message.content! },
      { role: 'user', content: 'two' },
    );
    await client.chat.completions.create({ model: 'tiny', messages });
    // The SDK never got that answer (say, its timeout fired as it arrived) and retries the turn.
    const again = await client.chat.completions.create(
      { model: 'tiny', messages },
      { headers: { 'x-stainless-retry-count': '1' } },
    );
    assert.is(again.choices[0]!.message.content, 'answer3');
    // The same prompt without the header is a second sample of the turn: its own trajectory.
    await client.chat.completions.create({ model: 'tiny', messages });
    const st = s.session.stats;
    assert.is(st.aborted, 1);
    assert.is(st.trajectories, 2);
    const [t] = s.session.trajectories(1, meta);
    assert.is(trained(t!), 'answer1<|end|>answer3<|end|>');
    assert.is(
      tok.decode(s.session.aborted[0]!.outputTokens, { skipSpecialTokens: false }),
      'answer2<|end|>',
    );
  } finally {
    await gw.close();
  }
});

test.run();
