import { test } from 'uvu';
import * as assert from 'uvu/assert';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, tool as aiTool } from 'ai';
import { z } from 'zod';
import type { Gateway } from '../../gateway/server.ts';
import type { ChatTokenizer } from '../../model/tokenizer.ts';
import {
  compactToolTemplate,
  openaiClient,
  qwenStyleTemplate,
  scriptedEngine,
  startGateway,
  suiteGateway,
  tokenizerWith,
} from './helpers.ts';

// tool_choice enforced through the official clients: `required` and a named function start the
// answer with the template's own opening of a call (prompt tokens, masked out of the loss) so the
// model can only complete a call; `none` leaves the tools out of the prompt. The scripted model
// answers in text unless its prompt already opens a call, which it then completes.
const tools: OpenAI.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'add', parameters: { type: 'object' } } },
  { type: 'function', function: { name: 'mul', parameters: { type: 'object' } } },
];
const user = [{ role: 'user' as const, content: 'What is 2+3?' }];

function model(tok: ChatTokenizer, prompts: string[], newline: boolean) {
  const close = `${newline ? '\n' : ''}</tool_call>`;
  return scriptedEngine(tok, (prompt) => {
    prompts.push(prompt);
    if (prompt.endsWith('"arguments": ')) return `{"a": 2, "b": 3}}${close}`;
    if (prompt.endsWith('{"name": "')) return `add", "arguments": {"a": 2, "b": 3}}${close}`;
    if (prompt.includes('<tool_response>')) return 'The sum is 5.';
    return 'I can do that in my head: 5.';
  });
}

let client: OpenAI;
const prompts: string[] = [];
let sessionOf: ReturnType<Gateway['openSession']>;
const tok = tokenizerWith(compactToolTemplate);
const gateway = suiteGateway(test, { engine: model(tok, prompts, false), tokenizer: tok });
test.before.each(() => {
  prompts.length = 0;
  sessionOf = gateway.gw.openSession();
  client = openaiClient(gateway.gw, sessionOf.apiKey);
});
test.after.each(() => sessionOf.close());

test('auto leaves the choice to the model (which answers in text here)', async () => {
  const r = await client.chat.completions.create({ model: 'tiny', messages: user, tools });
  assert.is(r.choices[0]!.finish_reason, 'stop');
  assert.is(r.choices[0]!.message.tool_calls, undefined);
});

test('required: the prompt opens a call, the model names the function', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages: user,
    tools,
    tool_choice: 'required',
  });
  assert.ok(prompts[0]!.endsWith('<|assistant|><tool_call>{"name": "'), prompts[0]);
  const c = r.choices[0]!;
  assert.is(c.finish_reason, 'tool_calls');
  const call = c.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
  assert.is(call.function.name, 'add');
  assert.equal(JSON.parse(call.function.arguments), { a: 2, b: 3 });
  assert.is(c.message.content, null);
  // Only the model's own tokens count as completion tokens.
  assert.is(
    r.usage!.completion_tokens,
    tok.encode(`add", "arguments": {"a": 2, "b": 3}}</tool_call>`).length + 1,
  );
});

test('a named function: the prompt opens that call through its arguments key; the next turn extends the same trajectory', async () => {
  const choice = { type: 'function' as const, function: { name: 'mul' } };
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages: user,
    tools,
    tool_choice: choice,
  });
  assert.ok(prompts[0]!.endsWith('<tool_call>{"name": "mul", "arguments": '), prompts[0]);
  const m = r.choices[0]!.message;
  const call = m.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
  assert.is(call.function.name, 'mul');
  const r2 = await client.chat.completions.create({
    model: 'tiny',
    messages: [...user, m, { role: 'tool', tool_call_id: call.id, content: '6' }],
    tools,
  });
  assert.is(r2.choices[0]!.message.content, 'The sum is 5.');
  const stats = sessionOf.session.stats;
  assert.is(stats.trajectories, 1, 'the template re-renders the forced call token for token');
  assert.is(stats.appended, 1);
  const [t] = sessionOf.session.trajectories(1, { groupId: 'g', promptIndex: 0 });
  const trained = tok.decode(
    t!.inputIds.filter((_, i) => t!.lossMask[i] === 1),
    { skipSpecialTokens: false },
  );
  assert.is(trained, '{"a": 2, "b": 3}}</tool_call><|end|>The sum is 5.<|end|>');
});

test('the opening follows the template: Qwen style puts the call on its own line', async () => {
  const qtok = tokenizerWith(qwenStyleTemplate);
  const seen: string[] = [];
  const g = await startGateway({ engine: model(qtok, seen, true), tokenizer: qtok });
  try {
    const c = openaiClient(g, g.openSession().apiKey);
    const r = await c.chat.completions.create({
      model: 'tiny',
      messages: user,
      tools,
      tool_choice: { type: 'function', function: { name: 'add' } },
    });
    assert.ok(
      seen[0]!.endsWith('<|assistant|><tool_call>\n{"name": "add", "arguments": '),
      seen[0],
    );
    const call = r.choices[0]!.message
      .tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.equal(JSON.parse(call.function.arguments), { a: 2, b: 3 });
  } finally {
    await g.close();
  }
});

test('streaming a forced call: one tool-call delta, no content', async () => {
  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages: user,
    tools,
    tool_choice: 'required',
    stream: true,
  });
  let content = '';
  const names: string[] = [];
  for await (const ch of stream) {
    content += ch.choices[0]?.delta.content ?? '';
    for (const d of ch.choices[0]?.delta.tool_calls ?? [])
      if (d.function?.name) names.push(d.function.name);
  }
  assert.is(content, '');
  assert.equal(names, ['add']);
});

test('none: the tools stay out of the prompt and no call is parsed', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages: user,
    tools,
    tool_choice: 'none',
  });
  assert.not.ok(prompts[0]!.includes('Tools:'), prompts[0]);
  assert.is(r.choices[0]!.message.tool_calls, undefined);
});

test('responses API: a named function and required', async () => {
  const rtools: OpenAI.Responses.Tool[] = [
    { type: 'function', name: 'add', parameters: {}, strict: false },
    { type: 'function', name: 'mul', parameters: {}, strict: false },
  ];
  const r = await client.responses.create({
    model: 'tiny',
    input: 'What is 2+3?',
    tools: rtools,
    tool_choice: { type: 'function', name: 'mul' },
  });
  const fc = r.output.find((o) => o.type === 'function_call');
  assert.ok(fc && fc.type === 'function_call' && fc.name === 'mul');
  const r2 = await client.responses.create({
    model: 'tiny',
    input: 'What is 2+3?',
    tools: rtools,
    tool_choice: 'required',
  });
  assert.ok(r2.output.some((o) => o.type === 'function_call' && o.name === 'add'));
});

test('Vercel AI SDK: toolChoice names the tool and it is called', async () => {
  const provider = createOpenAI({ baseURL: gateway.gw.baseURL, apiKey: sessionOf.apiKey });
  const calls: unknown[] = [];
  const r = await generateText({
    model: provider.chat('tiny'),
    prompt: 'What is 2+3?',
    tools: {
      add: aiTool({
        inputSchema: z.object({ a: z.number(), b: z.number() }),
        execute: async (x) => (calls.push(x), x.a + x.b),
      }),
    },
    toolChoice: { type: 'tool', toolName: 'add' },
  });
  assert.equal(calls, [{ a: 2, b: 3 }]);
  assert.is(r.toolCalls[0]!.toolName, 'add');
});

test('bad tool_choice: 400 naming the field', async () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ tool_choice: 'required' }, 'tool_choice'],
    [{ tools, tool_choice: 'always' }, 'tool_choice'],
    [
      { tools, tool_choice: { type: 'function', function: { name: 'div' } } },
      'tool_choice.function.name',
    ],
  ];
  for (const [body, param] of cases) {
    const err = await client.chat.completions
      .create({
        model: 'tiny',
        messages: user,
        ...body,
      } as OpenAI.ChatCompletionCreateParamsNonStreaming)
      .then(() => undefined)
      .catch((e: unknown) => e);
    assert.instance(err, OpenAI.BadRequestError);
    assert.is((err as InstanceType<typeof OpenAI.BadRequestError>).param, param);
  }
});

test.run();
