import { test } from 'uvu';
import * as assert from 'uvu/assert';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool as aiTool } from 'ai';
import {
  Agent,
  OpenAIProvider,
  Runner,
  setTracingDisabled,
  tool as agentTool,
} from '@openai/agents';
import { z } from 'zod';
import {
  addToolModel,
  compactToolTemplate,
  openaiClient,
  suiteGateway,
  tokenizerWith,
} from './helpers.ts';

// The clients agents are written with, unmodified, against the gateway: the Responses API
// through `openai`, the Vercel AI SDK (chat and responses models) and the OpenAI Agents SDK
// (both APIs). The scripted model calls `add(2, 3)` once, then answers with the tool's result.
setTracingDisabled(true);
const tok = tokenizerWith(compactToolTemplate);
const model = addToolModel(tok);
const gateway = suiteGateway(test, { engine: model.engine, tokenizer: tok });

function session(): {
  apiKey: string;
  close(): void;
  completions(): number;
  trajectories(): number;
} {
  const s = gateway.gw.openSession();
  return {
    apiKey: s.apiKey,
    close: s.close,
    completions: () => s.session.stats.completions,
    trajectories: () => s.session.stats.trajectories,
  };
}

test('openai responses API: function tools, function_call items, function_call_output, streaming events', async () => {
  const s = session();
  const client = openaiClient(gateway.gw, s.apiKey);
  const tools: OpenAI.Responses.Tool[] = [
    {
      type: 'function',
      name: 'add',
      parameters: { type: 'object', properties: {} },
      strict: false,
    },
  ];
  const r1 = await client.responses.create({
    model: 'tiny',
    instructions: 'Use tools.',
    input: 'What is 2+3?',
    tools,
  });
  assert.is(r1.object, 'response');
  assert.is(r1.status, 'completed');
  const call = r1.output.find((o) => o.type === 'function_call');
  assert.ok(call && call.type === 'function_call');
  assert.is(call.name, 'add');
  assert.equal(JSON.parse(call.arguments), { a: 2, b: 3 });
  assert.ok(r1.usage!.input_tokens > 0);
  const input: OpenAI.Responses.ResponseInput = [
    { role: 'user', content: 'What is 2+3?' },
    call,
    { type: 'function_call_output', call_id: call.call_id, output: '5' },
  ];
  const r2 = await client.responses.create({
    model: 'tiny',
    instructions: 'Use tools.',
    input,
    tools,
  });
  assert.is(r2.output_text, 'The answer is 5.');
  const events: string[] = [];
  const stream = client.responses.stream({
    model: 'tiny',
    instructions: 'Use tools.',
    input,
    tools,
  });
  for await (const e of stream) events.push(e.type);
  const final = await stream.finalResponse();
  assert.is(final.output_text, 'The answer is 5.');
  assert.equal(events.slice(0, 2), ['response.created', 'response.in_progress']);
  assert.ok(events.includes('response.output_text.delta'));
  assert.is(events[events.length - 1], 'response.completed');
  // The second turn extends the first; the streamed one re-asks the second turn, a new sample.
  assert.is(s.trajectories(), 2);
  assert.is(s.completions(), 3);
  s.close();
});

test('responses API: an evaluation session decodes greedily whatever the request says', async () => {
  const s = gateway.gw.openSession({ fixedSampling: { temperature: 0, topP: 1 } });
  try {
    const client = openaiClient(gateway.gw, s.apiKey);
    model.requests.length = 0;
    await client.responses.create({ model: 'tiny', input: 'What is 2+3?', temperature: 1 });
    assert.equal(
      model.requests.map((r) => r.gconfig?.greedy ?? false),
      [true],
    );
  } finally {
    s.close();
  }
});

test('responses API bad input names the field', async () => {
  const s = session();
  const client = openaiClient(gateway.gw, s.apiKey);
  const err = await client.responses
    .create({ model: 'tiny', input: [{ type: 'function_call_output', output: '5' } as never] })
    .then(
      () => null,
      (e: unknown) => e,
    );
  assert.ok(err instanceof OpenAI.BadRequestError);
  assert.is(err.param, 'input[0].call_id');
  s.close();
});

const addSchema = z.object({ a: z.number(), b: z.number() });

for (const api of ['chat', 'responses'] as const) {
  test(`Vercel AI SDK generateText with tools (${api} model)`, async () => {
    const s = session();
    const provider = createOpenAI({ baseURL: gateway.gw.baseURL, apiKey: s.apiKey });
    const model = api === 'chat' ? provider.chat('tiny') : provider.responses('tiny');
    const calls: unknown[] = [];
    const r = await generateText({
      model,
      prompt: 'What is 2+3?',
      tools: {
        add: aiTool({
          description: 'adds',
          inputSchema: addSchema,
          execute: async ({ a, b }) => (calls.push({ a, b }), a + b),
        }),
      },
      stopWhen: stepCountIs(4),
      maxRetries: 0,
    });
    assert.equal(calls, [{ a: 2, b: 3 }]);
    assert.is(r.text, 'The answer is 5.');
    assert.is(s.completions(), 2);
    assert.is(s.trajectories(), 1);
    s.close();
  });
}

test('Vercel AI SDK streamText (chat model) streams the tool call and the answer', async () => {
  const s = session();
  const provider = createOpenAI({ baseURL: gateway.gw.baseURL, apiKey: s.apiKey });
  const r = streamText({
    model: provider.chat('tiny'),
    prompt: 'What is 2+3?',
    tools: { add: aiTool({ inputSchema: addSchema, execute: async ({ a, b }) => a + b }) },
    stopWhen: stepCountIs(4),
    maxRetries: 0,
  });
  let text = '';
  for await (const t of r.textStream) text += t;
  assert.is(text, 'The answer is 5.');
  s.close();
});

for (const useResponses of [false, true]) {
  test(`OpenAI Agents SDK with a function tool (${useResponses ? 'responses' : 'chat completions'})`, async () => {
    const s = session();
    const provider = new OpenAIProvider({
      baseURL: gateway.gw.baseURL,
      apiKey: s.apiKey,
      useResponses,
    });
    const runner = new Runner({ modelProvider: provider, tracingDisabled: true });
    const add = agentTool({
      name: 'add',
      description: 'adds two numbers',
      parameters: addSchema,
      execute: async ({ a, b }) => String(a + b),
    });
    const agent = new Agent({
      name: 'calc',
      instructions: 'Use the add tool.',
      model: 'tiny',
      tools: [add],
    });
    const r = await runner.run(agent, 'What is 2+3?');
    assert.is(r.finalOutput, 'The answer is 5.');
    assert.is(s.completions(), 2);
    assert.is(s.trajectories(), 1);
    s.close();
  });
}

test.run();
