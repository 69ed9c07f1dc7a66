import { test } from 'uvu';
import * as assert from 'uvu/assert';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, tool as aiTool } from 'ai';
import { z } from 'zod';
import { SimulatedEngine } from '../../engines/simulated/simulated-engine.ts';
import type { Gateway } from '../../gateway/server.ts';
import {
  compactToolTemplate,
  hermesCall,
  openaiClient,
  scriptedEngine,
  startGateway,
  tokenizerWith,
} from './helpers.ts';

// `parallel_tool_calls: false` through the official clients, on a model that calls two tools in
// one turn: the answer ends with its first call, and the trajectory holds exactly the tokens the
// client was answered, whether the engine stops at the call's closing marker (the scripted engine
// honours stop strings) or generates past it (the gateway cuts the rest before recording).
const tok = tokenizerWith(compactToolTemplate);
const first = hermesCall('add', { a: 2, b: 3 });
const second = hermesCall('mul', { a: 2, b: 3 });
const tools: OpenAI.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'add', parameters: { type: 'object' } } },
  { type: 'function', function: { name: 'mul', parameters: { type: 'object' } } },
];
const rtools: OpenAI.Responses.Tool[] = [
  { type: 'function', name: 'add', parameters: {}, strict: false },
  { type: 'function', name: 'mul', parameters: {}, strict: false },
];
const user = [{ role: 'user' as const, content: 'What are 2+3 and 2*3?' }];

const reply = (prompt: string): string =>
  prompt.includes('<tool_response>') ? 'They are 5 and 6.' : first + second;

/** Stop strings each request carried. */
const stops: string[][] = [];
const honours = scriptedEngine(tok, (prompt, req) => {
  stops.push(req.gconfig?.stop ?? []);
  return reply(prompt);
});
// Ignores stop strings, as an HTTP engine does for one that spans a re-sent segment.
const ignores = new SimulatedEngine({
  logprob: -0.25,
  respond: (ids) => [
    ...tok.encode(reply(tok.decode(ids, { skipSpecialTokens: false }))),
    tok.eosTokenId!,
  ],
});

const gateways: Record<'honours' | 'ignores', Gateway> = {} as never;
let sessionOf: ReturnType<Gateway['openSession']>;

test.before(async () => {
  gateways.honours = await startGateway({ engine: honours, tokenizer: tok });
  gateways.ignores = await startGateway({ engine: ignores, tokenizer: tok });
});
test.after(async () => {
  await gateways.honours.close();
  await gateways.ignores.close();
});
test.before.each(() => {
  stops.length = 0;
});

function clientOf(engine: 'honours' | 'ignores'): OpenAI {
  sessionOf = gateways[engine].openSession();
  return openaiClient(gateways[engine], sessionOf.apiKey);
}

/** The text of the episode's trained (unmasked) tokens, one string per trajectory. */
function trained(): string[] {
  return sessionOf.session.trajectories(1, { groupId: 'g', promptIndex: 0 }).map((t) =>
    tok.decode(
      t.inputIds.filter((_, i) => t.lossMask[i] === 1),
      { skipSpecialTokens: false },
    ),
  );
}

function names(m: OpenAI.ChatCompletionMessage): string[] {
  return (m.tool_calls ?? []).map(
    (c) => (c as OpenAI.ChatCompletionMessageFunctionToolCall).function.name,
  );
}

test('by default the model calls both tools in one turn', async () => {
  const r = await clientOf('honours').chat.completions.create({
    model: 'tiny',
    messages: user,
    tools,
  });
  assert.equal(names(r.choices[0]!.message), ['add', 'mul']);
  assert.not.ok(stops[0]!.includes('</tool_call>'));
});

for (const engine of ['honours', 'ignores'] as const) {
  test(`chat, engine ${engine} stop strings: one call; the trajectory holds only its tokens and the next turn extends it`, async () => {
    const client = clientOf(engine);
    const r = await client.chat.completions.create({
      model: 'tiny',
      messages: user,
      tools,
      parallel_tool_calls: false,
      logprobs: true,
    });
    const c = r.choices[0]!;
    assert.equal(names(c.message), ['add']);
    assert.is(c.finish_reason, 'tool_calls');
    assert.is(c.message.content, null);
    if (engine === 'honours') assert.ok(stops[0]!.includes('</tool_call>'), 'the engine stops');
    // Usage and logprobs count exactly the tokens kept: the first call, no end token.
    assert.is(r.usage!.completion_tokens, tok.encode(first).length);
    assert.is(c.logprobs!.content!.map((e) => e.token).join(''), first);
    assert.equal(trained(), [first]);

    const call = c.message.tool_calls![0]!;
    const r2 = await client.chat.completions.create({
      model: 'tiny',
      messages: [...user, c.message, { role: 'tool', tool_call_id: call.id, content: '5' }],
      tools,
      parallel_tool_calls: false,
    });
    assert.is(r2.choices[0]!.message.content, 'They are 5 and 6.');
    const stats = sessionOf.session.stats;
    assert.is(stats.trajectories, 1, 'the template re-renders the one call token for token');
    assert.is(stats.appended, 1);
    // The end token after the call is the template's (masked), not the model's.
    assert.equal(trained(), [`${first}They are 5 and 6.<|end|>`]);
  });

  test(`chat streaming, engine ${engine} stop strings: one tool-call delta, logprobs of the kept tokens only`, async () => {
    const stream = await clientOf(engine).chat.completions.create({
      model: 'tiny',
      messages: user,
      tools,
      parallel_tool_calls: false,
      logprobs: true,
      stream: true,
      stream_options: { include_usage: true },
    });
    const called: string[] = [];
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const ch of stream) {
      for (const d of ch.choices[0]?.delta.tool_calls ?? [])
        if (d.function?.name) called.push(d.function.name);
      text += (ch.choices[0]?.logprobs?.content ?? []).map((e) => e.token).join('');
      finish = ch.choices[0]?.finish_reason ?? finish;
      usage = ch.usage ?? usage;
    }
    assert.equal(called, ['add']);
    assert.is(finish, 'tool_calls');
    assert.is(text, first);
    assert.is(usage!.completion_tokens, tok.encode(first).length);
    assert.equal(trained(), [first]);
  });
}

test('responses API, whole and streamed: one function_call item', async () => {
  const client = clientOf('ignores');
  const r = await client.responses.create({
    model: 'tiny',
    input: 'What are 2+3 and 2*3?',
    tools: rtools,
    parallel_tool_calls: false,
  });
  assert.equal(
    r.output.flatMap((o) => (o.type === 'function_call' ? [o.name] : [])),
    ['add'],
  );
  assert.is(r.parallel_tool_calls, false);
  assert.is(r.usage!.output_tokens, tok.encode(first).length);

  const stream = await client.responses.create({
    model: 'tiny',
    input: 'What are 2+3 and 2*3?',
    tools: rtools,
    parallel_tool_calls: false,
    stream: true,
  });
  const called: string[] = [];
  for await (const e of stream)
    if (e.type === 'response.function_call_arguments.done') called.push(e.name);
  assert.equal(called, ['add']);
  assert.equal(trained(), [first, first]);
});

for (const api of ['chat', 'responses'] as const) {
  test(`Vercel AI SDK (${api}): parallelToolCalls false runs one tool`, async () => {
    const gw = gateways.ignores;
    sessionOf = gw.openSession();
    const provider = createOpenAI({ baseURL: gw.baseURL, apiKey: sessionOf.apiKey });
    const executed: string[] = [];
    const tool = (name: string) =>
      aiTool({
        inputSchema: z.object({ a: z.number(), b: z.number() }),
        execute: async (x) => (executed.push(name), x.a + x.b),
      });
    const model = api === 'chat' ? provider.chat('tiny') : provider.responses('tiny');
    const both = await generateText({
      model,
      prompt: 'What are 2+3 and 2*3?',
      tools: { add: tool('add'), mul: tool('mul') },
    });
    assert.equal(
      both.toolCalls.map((c) => c.toolName),
      ['add', 'mul'],
      'allowed, the model calls both',
    );
    executed.length = 0;
    const one = await generateText({
      model,
      prompt: 'What are 2+3 and 2*3?',
      tools: { add: tool('add'), mul: tool('mul') },
      providerOptions: { openai: { parallelToolCalls: false } },
    });
    assert.equal(
      one.toolCalls.map((c) => c.toolName),
      ['add'],
    );
    assert.equal(executed, ['add']);
  });
}

test('with tool_choice required the forced opening counts toward the first call; a first block that does not parse ends the turn as text', async () => {
  const forced = scriptedEngine(tok, (prompt) =>
    prompt.endsWith('{"name": "')
      ? `${first.slice(first.indexOf('add'))}${second}`
      : `<tool_call>{"name": oops}</tool_call>${first}`,
  );
  const gw = await startGateway({ engine: forced, tokenizer: tok });
  try {
    sessionOf = gw.openSession();
    const c = openaiClient(gw, sessionOf.apiKey);
    const r = await c.chat.completions.create({
      model: 'tiny',
      messages: user,
      tools,
      tool_choice: 'required',
      parallel_tool_calls: false,
    });
    assert.equal(names(r.choices[0]!.message), ['add']);
    // The opening came with the prompt: only the rest of the one call is trained.
    assert.equal(trained(), [first.slice(first.indexOf('add'))]);

    sessionOf = gw.openSession();
    const c2 = openaiClient(gw, sessionOf.apiKey);
    const bad = await c2.chat.completions.create({
      model: 'tiny',
      messages: user,
      tools,
      parallel_tool_calls: false,
    });
    assert.is(bad.choices[0]!.finish_reason, 'stop');
    assert.is(bad.choices[0]!.message.content, '<tool_call>{"name": oops}</tool_call>');
    assert.equal(trained(), ['<tool_call>{"name": oops}</tool_call>']);
  } finally {
    await gw.close();
  }
});

test('parallel_tool_calls that is not a boolean: 400 naming it', async () => {
  const err = await clientOf('honours')
    .chat.completions.create({
      model: 'tiny',
      messages: user,
      tools,
      parallel_tool_calls: 'no',
    } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming)
    .then(() => undefined)
    .catch((e: unknown) => e);
  assert.instance(err, OpenAI.BadRequestError);
  assert.is((err as InstanceType<typeof OpenAI.BadRequestError>).param, 'parallel_tool_calls');
});

test.run();
