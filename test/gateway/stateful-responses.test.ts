import { test } from 'uvu';
import * as assert from 'uvu/assert';
import OpenAI from 'openai';
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool } from '@openai/agents';
import { z } from 'zod';
import {
  addToolModel,
  compactToolTemplate,
  hermesCall,
  openaiClient,
  suiteGateway,
  tokenizerWith,
} from './helpers.ts';

// Stateful Responses: `store` (default true) + `previous_response_id` within an episode, through
// the `openai` client and the OpenAI Agents SDK in its default mode (the Responses API) with the
// server managing the conversation. The scripted model calls `add(2, 3)` after each user turn,
// then answers with the tool's result.
setTracingDisabled(true);
const tok = tokenizerWith(compactToolTemplate);
const { engine, prompts } = addToolModel(tok);
const gateway = suiteGateway(test, { engine, tokenizer: tok });

const tools: OpenAI.Responses.Tool[] = [
  { type: 'function', name: 'add', parameters: { type: 'object', properties: {} }, strict: false },
];

async function refusal(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => null,
    (e: unknown) => e,
  );
}

test('previous_response_id continues a stored response: the same prompt, one exact-token trajectory', async () => {
  const s = gateway.gw.openSession();
  const client = openaiClient(gateway.gw, s.apiKey);
  const r1 = await client.responses.create({
    model: 'tiny',
    instructions: 'Use tools.',
    input: 'What is 2+3?',
    tools,
  });
  assert.is((r1 as { store?: boolean }).store, true);
  const call = r1.output.find((o) => o.type === 'function_call');
  assert.ok(call && call.type === 'function_call');
  const r2 = await client.responses.create({
    model: 'tiny',
    instructions: 'Use tools.',
    previous_response_id: r1.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '5' }],
    tools,
  });
  assert.is(r2.previous_response_id, r1.id);
  assert.is(r2.output_text, 'The answer is 5.');
  // The prompt is what the stateless form (the whole conversation in input) renders.
  assert.is(
    prompts.at(-1),
    `<|system|>Tools: add<|system|>Use tools.<|user|>What is 2+3?<|assistant|>${hermesCall('add', { a: 2, b: 3 })}<|end|><|user|><tool_response>5</tool_response><|assistant|>`,
  );
  // A follow-up on r2, streamed: the stored chain goes on.
  const stream = client.responses.stream({
    model: 'tiny',
    instructions: 'Use tools.',
    previous_response_id: r2.id,
    input: 'And again?',
    tools,
  });
  const r3 = await stream.finalResponse();
  assert.is(r3.previous_response_id, r2.id);
  assert.ok(prompts.at(-1)!.endsWith('The answer is 5.<|end|><|user|>And again?<|assistant|>'));
  assert.ok(r3.output.some((o) => o.type === 'function_call'));
  assert.equal(s.session.stats, {
    completions: 3,
    appended: 2,
    bridged: 0,
    trajectories: 1,
    aborted: 0,
    breaks: [],
    drift: [],
  });
  s.close();
});

test('store: false keeps nothing; another episode cannot continue this one', async () => {
  const a = gateway.gw.openSession();
  const b = gateway.gw.openSession();
  const ca = openaiClient(gateway.gw, a.apiKey);
  const cb = openaiClient(gateway.gw, b.apiKey);
  const unstored = await ca.responses.create({
    model: 'tiny',
    input: 'What is 2+3?',
    store: false,
  });
  assert.is((unstored as { store?: boolean }).store, false);
  const e1 = await refusal(
    ca.responses.create({ model: 'tiny', input: 'x', previous_response_id: unstored.id }),
  );
  assert.ok(e1 instanceof OpenAI.BadRequestError);
  assert.is(e1.param, 'previous_response_id');
  const stored = await ca.responses.create({ model: 'tiny', input: 'What is 2+3?' });
  const e2 = await refusal(
    cb.responses.create({ model: 'tiny', input: 'x', previous_response_id: stored.id }),
  );
  assert.ok(e2 instanceof OpenAI.BadRequestError);
  assert.match(e2.message, /in this episode/);
  assert.is(b.session.stats.completions, 0);
  a.close();
  // The episode is over: its key, and with it its responses, are gone.
  const e3 = await refusal(
    ca.responses.create({ model: 'tiny', input: 'x', previous_response_id: stored.id }),
  );
  assert.ok(e3 instanceof OpenAI.AuthenticationError);
  b.close();
});

test('OpenAI Agents SDK, default mode (Responses), conversation kept by the server across runs', async () => {
  const s = gateway.gw.openSession();
  const bodies: Record<string, unknown>[] = [];
  // What the Agents SDK sends, seen on the way out (its OpenAI client takes the global fetch).
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (url, init) => {
    if (typeof init?.body === 'string')
      bodies.push(JSON.parse(init.body) as Record<string, unknown>);
    return realFetch(url, init);
  };
  const provider = new OpenAIProvider({ baseURL: gateway.gw.baseURL, apiKey: s.apiKey });
  const runner = new Runner({ modelProvider: provider, tracingDisabled: true });
  const add = tool({
    name: 'add',
    description: 'adds two numbers',
    parameters: z.object({ a: z.number(), b: z.number() }),
    execute: async ({ a, b }) => String(a + b),
  });
  const agent = new Agent({
    name: 'calc',
    instructions: 'Use the add tool.',
    model: 'tiny',
    tools: [add],
  });
  let r1, r2;
  try {
    r1 = await runner.run(agent, 'What is 2+3?');
    r2 = await runner.run(agent, 'And again?', { previousResponseId: r1.lastResponseId! });
  } finally {
    globalThis.fetch = realFetch;
  }
  assert.is(r1.finalOutput, 'The answer is 5.');
  assert.is(r2.finalOutput, 'The answer is 5.');
  // The second run sends only what is new, chained by previous_response_id, on the Responses API.
  const second = bodies.slice(2);
  assert.is(second.length, 2);
  assert.ok(second.every((b) => typeof b['previous_response_id'] === 'string'));
  assert.is(JSON.stringify(second[1]!['input']).includes('What is 2+3?'), false);
  // Four completions, one trajectory: every prompt extends the tokens recorded before it.
  assert.equal(s.session.stats, {
    completions: 4,
    appended: 3,
    bridged: 0,
    trajectories: 1,
    aborted: 0,
    breaks: [],
    drift: [],
  });
  s.close();
});

test.run();
