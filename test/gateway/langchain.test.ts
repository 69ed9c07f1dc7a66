import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  HumanMessage,
  ToolMessage,
  type AIMessageChunk,
  type BaseMessage,
} from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { ChatOpenAI } from '@langchain/openai';
import { z } from 'zod';
import { addToolModel, compactToolTemplate, suiteGateway, tokenizerWith } from './helpers.ts';

// A LangChain.js chat model (`@langchain/openai`'s ChatOpenAI with bound tools), unmodified,
// against the gateway: a tool loop on chat completions, recorded as one exact-token trajectory.
const tok = tokenizerWith(compactToolTemplate);
const gateway = suiteGateway(test, { engine: addToolModel(tok).engine, tokenizer: tok });

const add = tool(async ({ a, b }: { a: number; b: number }) => String(a + b), {
  name: 'add',
  description: 'adds two numbers',
  schema: z.object({ a: z.number(), b: z.number() }),
});

test('ChatOpenAI with bound tools, a tool loop', async () => {
  const s = gateway.gw.openSession();
  const model = new ChatOpenAI({
    model: 'tiny',
    apiKey: s.apiKey,
    configuration: { baseURL: gateway.gw.baseURL },
    maxRetries: 0,
  }).bindTools([add]);
  const messages: BaseMessage[] = [new HumanMessage('What is 2+3?')];
  for (let turn = 0; turn < 3; turn++) {
    const ai = await model.invoke(messages);
    messages.push(ai);
    if (!ai.tool_calls?.length) break;
    for (const call of ai.tool_calls) {
      const out = await add.invoke(call.args as { a: number; b: number });
      messages.push(new ToolMessage({ content: out, tool_call_id: call.id! }));
    }
  }
  assert.is(messages.length, 4);
  assert.is(messages[3]!.content, 'The answer is 5.');
  const st = s.session.stats;
  assert.is(st.completions, 2);
  assert.is(st.trajectories, 1);
  assert.is(st.appended, 1);
  s.close();
});

test('ChatOpenAI .stream(): the tool call arrives in chunks that concatenate to the call', async () => {
  const s = gateway.gw.openSession();
  const model = new ChatOpenAI({
    model: 'tiny',
    apiKey: s.apiKey,
    configuration: { baseURL: gateway.gw.baseURL },
    maxRetries: 0,
  }).bindTools([add]);
  let whole: AIMessageChunk | undefined;
  for await (const chunk of await model.stream([new HumanMessage('What is 2+3?')]))
    whole = whole ? whole.concat(chunk) : chunk;
  assert.equal(
    whole!.tool_calls?.map((c) => [c.name, c.args]),
    [['add', { a: 2, b: 3 }]],
  );
  assert.ok(whole!.usage_metadata!.input_tokens > 0);
  assert.is(s.session.stats.trajectories, 1);
  s.close();
});

test('ChatOpenAI with streaming: true: invoke reads the stream to its end, then counts tokens with tiktoken', async () => {
  // With `streaming: true`, invoke streams and afterwards estimates the token counts with
  // tiktoken, whose ranks LangChain downloads from tiktoken.pages.dev (retrying for minutes where
  // there is no network: what looked like a hang of the gateway's stream). That CDN is served
  // here, in process, from js-tiktoken's own copy of the same file; everything else is real.
  const cdn = 'https://tiktoken.pages.dev/js/';
  const asked: string[] = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = (async (input: Parameters<typeof fetch>[0], init?: RequestInit) => {
    const url = String(input instanceof Request ? input.url : input);
    if (!url.startsWith(cdn)) return realFetch(input, init);
    asked.push(url.slice(cdn.length));
    const { default: ranks } = await import('js-tiktoken/ranks/gpt2');
    return new Response(JSON.stringify(ranks), { headers: { 'content-type': 'application/json' } });
  }) as typeof fetch;
  const s = gateway.gw.openSession();
  try {
    const model = new ChatOpenAI({
      model: 'tiny',
      apiKey: s.apiKey,
      configuration: { baseURL: gateway.gw.baseURL },
      maxRetries: 0,
      streaming: true,
    }).bindTools([add]);
    const ai = await model.invoke([new HumanMessage('What is 2+3?')]);
    assert.equal(
      ai.tool_calls?.map((c) => [c.name, c.args]),
      [['add', { a: 2, b: 3 }]],
    );
    assert.ok(asked.includes('gpt2.json'), `LangChain asked the CDN for ${asked.join(', ')}`);
    assert.is(s.session.stats.completions, 1);
  } finally {
    globalThis.fetch = realFetch;
    s.close();
  }
});

test.run();
