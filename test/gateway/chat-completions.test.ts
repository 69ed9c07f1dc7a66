import { test } from 'uvu';
import * as assert from 'uvu/assert';
import OpenAI from 'openai';
import {
  compactToolTemplate,
  hermesCall,
  openaiClient,
  scriptedEngine,
  suiteGateway,
  tokenizerWith,
} from './helpers.ts';

// The official `openai` client against the gateway: plain and tool-call completions, streaming
// with tool-call deltas, n, logprobs, stop, length, and the error shapes its typed errors rely on.
const tok = tokenizerWith(compactToolTemplate);
const tools: OpenAI.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'add',
      description: 'adds two numbers',
      parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } } },
    },
  },
];
let client: OpenAI;
let prompts: string[] = [];

const engine = scriptedEngine(tok, (prompt) => {
  prompts.push(prompt);
  if (prompt.includes('<tool_response>5</tool_response>')) return 'The sum is 5.';
  if (prompt.includes('use a tool'))
    return `Let me add.${hermesCall('add', { a: 2, b: 3 })}${hermesCall('add', { a: 1, b: 1 })}`;
  if (prompt.includes('ramble')) return 'x'.repeat(100);
  return 'Hello there. Bye.';
});
const gateway = suiteGateway(test, { engine, tokenizer: tok, contextLength: 400 });
test.before(() => {
  client = openaiClient(gateway.gw, gateway.gw.openSession().apiKey);
});
test.before.each(() => {
  prompts = [];
});

test('a plain completion has the documented shape, usage and finish_reason stop', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'hi' }],
  });
  assert.is(r.object, 'chat.completion');
  assert.is(r.choices[0]!.message.content, 'Hello there. Bye.');
  assert.is(r.choices[0]!.message.role, 'assistant');
  assert.is(r.choices[0]!.finish_reason, 'stop');
  assert.is(r.usage!.prompt_tokens, tok.encode('<|user|>hi<|assistant|>').length);
  assert.is(r.usage!.completion_tokens, 'Hello there. Bye.'.length + 1, 'the end token counts');
  assert.is(r.usage!.total_tokens, r.usage!.prompt_tokens + r.usage!.completion_tokens);
  assert.is(prompts[0], '<|user|>hi<|assistant|>', 'the policy template rendered the prompt');
});

test('tool calls are parsed from the generated text; tools reach the template; the result goes back as a tool turn', async () => {
  const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'use a tool' }];
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages,
    tools,
    tool_choice: 'auto',
  });
  const m = r.choices[0]!.message;
  assert.is(r.choices[0]!.finish_reason, 'tool_calls');
  assert.is(m.content, 'Let me add.');
  assert.is(m.tool_calls!.length, 2);
  const call = m.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
  assert.is(call.type, 'function');
  assert.is(call.function.name, 'add');
  assert.equal(JSON.parse(call.function.arguments), { a: 2, b: 3 });
  assert.match(call.id, /^call_/);
  assert.match(prompts[0]!, /^<\|system\|>Tools: add<\|user\|>use a tool/);
  messages.push(m);
  for (const c of m.tool_calls!)
    messages.push({ role: 'tool', tool_call_id: c.id, content: c === call ? '5' : '2' });
  const r2 = await client.chat.completions.create({ model: 'tiny', messages, tools });
  assert.is(r2.choices[0]!.message.content, 'The sum is 5.');
  assert.ok(
    prompts[1]!.includes(hermesCall('add', { a: 2, b: 3 })),
    'the assistant call is re-rendered by the template',
  );
  assert.ok(
    prompts[1]!.endsWith(
      '<|user|><tool_response>5</tool_response><|user|><tool_response>2</tool_response><|assistant|>',
    ),
  );
});

test('tool_choice none returns the call text as content', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'use a tool' }],
    tools,
    tool_choice: 'none',
  });
  assert.is(r.choices[0]!.finish_reason, 'stop');
  assert.ok(r.choices[0]!.message.content!.includes('<tool_call>'));
  assert.is(r.choices[0]!.message.tool_calls, undefined);
});

test('streaming: content and tool-call deltas, finish reason, usage, [DONE]', async () => {
  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'use a tool' }],
    tools,
    stream: true,
    stream_options: { include_usage: true },
  });
  let content = '';
  const args = new Map<number, { name: string; arguments: string; id: string }>();
  let finish: string | null = null;
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of stream) {
    assert.is(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta.content ?? '';
    for (const d of c.delta.tool_calls ?? []) {
      const cur = args.get(d.index) ?? { name: '', arguments: '', id: '' };
      cur.name += d.function?.name ?? '';
      cur.arguments += d.function?.arguments ?? '';
      cur.id += d.id ?? '';
      args.set(d.index, cur);
    }
    finish = c.finish_reason ?? finish;
  }
  assert.is(content, 'Let me add.');
  assert.is(finish, 'tool_calls');
  assert.is(args.size, 2);
  assert.equal(JSON.parse(args.get(1)!.arguments), { a: 1, b: 1 });
  assert.match(args.get(0)!.id, /^call_/);
  assert.ok(usage && usage.completion_tokens > 0);
  // The client's stream helper assembles the same message.
  const runner = client.chat.completions.stream({
    model: 'tiny',
    messages: [{ role: 'user', content: 'use a tool' }],
    tools,
  });
  const final = await runner.finalChatCompletion();
  assert.is(final.choices[0]!.message.tool_calls!.length, 2);
});

test('n, logprobs, stop and max_tokens', async () => {
  const r = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'hi' }],
    n: 3,
    logprobs: true,
    stop: ['. B'],
  });
  assert.is(r.choices.length, 3);
  assert.equal(
    r.choices.map((c) => c.index),
    [0, 1, 2],
  );
  assert.is(
    r.choices[0]!.message.content,
    'Hello there',
    'the stop string is not part of the content',
  );
  const lp = r.choices[0]!.logprobs!.content!;
  assert.is(
    lp.map((t) => t.token).join(''),
    'Hello there. B',
    'one entry per generated token, up to the stop string',
  );
  assert.ok(lp.every((t) => t.logprob === -0.25));
  const short = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'ramble' }],
    max_completion_tokens: 7,
  });
  assert.is(short.choices[0]!.finish_reason, 'length');
  assert.is(short.choices[0]!.message.content, 'xxxxxxx');
  assert.is(short.usage!.completion_tokens, 7);
});

test('GET /v1/models lists the served model', async () => {
  const list = await client.models.list();
  assert.equal(
    list.data.map((m) => m.id),
    ['tiny'],
  );
  assert.is((await client.models.retrieve('tiny')).id, 'tiny');
});

async function failure(p: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const e = await p.then(
    () => null,
    (err: unknown) => err,
  );
  assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${String(e)}`);
  return e;
}

test('bad input: OpenAI error shapes and statuses, naming the field', async () => {
  const bad = await failure(
    client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'robot', content: 'x' } as never],
    }),
  );
  assert.ok(bad instanceof OpenAI.BadRequestError);
  assert.is(bad.param, 'messages[0].role');
  assert.match(bad.message, /messages\[0\]\.role: 'robot' is not one of/);
  const temp = await failure(
    client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'x' }],
      temperature: 7,
    }),
  );
  assert.is(temp.param, 'temperature');
  const args = await failure(
    client.chat.completions.create({
      model: 'tiny',
      messages: [
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'c', type: 'function', function: { name: 'add', arguments: '{oops' } },
          ],
        },
      ],
    }),
  );
  assert.is(args.param, 'messages[0].tool_calls[0].function.arguments');
  const empty = await failure(client.chat.completions.create({ model: 'tiny', messages: [] }));
  assert.is(empty.param, 'messages');
  const long = await failure(
    client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'y'.repeat(500) }],
    }),
  );
  assert.ok(long instanceof OpenAI.BadRequestError);
  assert.is(long.code, 'context_length_exceeded');
  const model = await failure(
    client.chat.completions.create({ model: 'gpt-9', messages: [{ role: 'user', content: 'x' }] }),
  );
  assert.ok(model instanceof OpenAI.NotFoundError);
  assert.is(model.code, 'model_not_found');
  const wrongKey = openaiClient(gateway.gw, 'rtj-guessed');
  const auth = await failure(
    wrongKey.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }] }),
  );
  assert.ok(auth instanceof OpenAI.AuthenticationError);
  assert.is(auth.code, 'invalid_api_key');
});

test('raw HTTP: malformed JSON, a missing key, unknown routes', async () => {
  const post = (body: string, headers: Record<string, string> = {}) =>
    fetch(`${gateway.gw.baseURL}/chat/completions`, {
      method: 'POST',
      body,
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${client.apiKey}`,
        ...headers,
      },
    });
  const r = await post('{"model": "tiny", "messages": [');
  assert.is(r.status, 400);
  const body = (await r.json()) as { error: { type: string; code: string; param: string } };
  assert.equal(
    [body.error.type, body.error.code, body.error.param],
    ['invalid_request_error', 'invalid_json', 'body'],
  );
  const noKey = await fetch(`${gateway.gw.baseURL}/models`);
  assert.is(noKey.status, 401);
  assert.is(
    ((await noKey.json()) as { error: { type: string } }).error.type,
    'authentication_error',
  );
  const missing = await fetch(`${gateway.gw.baseURL}/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${client.apiKey}` },
  });
  assert.is(missing.status, 404);
});

test.run();
