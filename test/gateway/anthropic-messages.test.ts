import { test } from 'uvu';
import * as assert from 'uvu/assert';
import Anthropic from '@anthropic-ai/sdk';
import {
  addToolModel,
  compactToolTemplate,
  hermesCall,
  suiteGateway,
  tokenizerWith,
} from './helpers.ts';

// `POST /v1/messages` through `@anthropic-ai/sdk`, unmodified: the client is built with the
// agent's own `baseURL` (ending in /v1) and key. The scripted model calls `add(2, 3)` once, then
// answers with the tool's result; a prompt that asks for "stop" answers past a stop sequence.
const tok = tokenizerWith(compactToolTemplate);
const { engine, prompts, requests } = addToolModel(tok, {
  reply: (prompt) => {
    if (prompt.endsWith('<tool_call>{"name": "'))
      return 'add", "arguments": {"a": 2, "b": 3}}</tool_call>';
    if (prompt.includes('say stop')) return 'one two STOP three';
    if (prompt.includes('chat only')) return 'Hello there.';
    return undefined;
  },
});
const gateway = suiteGateway(test, { engine, tokenizer: tok });

const tools: Anthropic.Tool[] = [
  {
    name: 'add',
    description: 'adds two numbers',
    input_schema: {
      type: 'object',
      properties: { a: { type: 'number' }, b: { type: 'number' } },
    },
  },
];

function client(apiKey: string): Anthropic {
  return new Anthropic({ baseURL: gateway.gw.baseURL, apiKey, maxRetries: 0 });
}

test('messages with tools: tool_use, tool_result, the answer; one exact-token trajectory', async () => {
  const s = gateway.gw.openSession();
  const c = client(s.apiKey);
  const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'What is 2+3?' }];
  const r1 = await c.messages.create({
    model: 'tiny',
    max_tokens: 100,
    system: 'Use tools.',
    messages,
    tools,
  });
  assert.is(r1.type, 'message');
  assert.is(r1.role, 'assistant');
  assert.is(r1.stop_reason, 'tool_use');
  const use = r1.content.find((b) => b.type === 'tool_use');
  assert.ok(use && use.type === 'tool_use');
  assert.is(use.name, 'add');
  assert.ok(use.id.startsWith('toolu_'));
  assert.equal(use.input, { a: 2, b: 3 });
  assert.ok(r1.usage.input_tokens > 0 && r1.usage.output_tokens > 0);
  assert.ok(
    prompts.at(-1)!.startsWith('<|system|>Tools: add<|system|>Use tools.<|user|>What is 2+3?'),
  );

  messages.push({ role: 'assistant', content: r1.content });
  messages.push({
    role: 'user',
    content: [{ type: 'tool_result', tool_use_id: use.id, content: '5' }],
  });
  const r2 = await c.messages.create({
    model: 'tiny',
    max_tokens: 100,
    system: 'Use tools.',
    messages,
    tools,
  });
  assert.is(r2.stop_reason, 'end_turn');
  assert.equal(r2.content, [{ type: 'text', text: 'The answer is 5.' }]);
  // The second prompt extends the first completion token for token.
  const st = s.session.stats;
  assert.is(st.completions, 2);
  assert.is(st.appended, 1);
  assert.is(st.trajectories, 1);
  const [t] = s.session.trajectories(1, { groupId: 'g', promptIndex: 0 });
  assert.is(
    tok.decode(
      t!.inputIds.filter((_, i) => t!.lossMask[i] === 1),
      { skipSpecialTokens: false },
    ),
    `${hermesCall('add', { a: 2, b: 3 })}<|end|>The answer is 5.<|end|>`,
  );
  s.close();
});

test('streaming: message_start, content blocks with text and input_json deltas, message_delta, message_stop', async () => {
  const s = gateway.gw.openSession();
  const c = client(s.apiKey);
  const events: string[] = [];
  const stream = c.messages.stream({
    model: 'tiny',
    max_tokens: 100,
    messages: [{ role: 'user', content: 'What is 2+3?' }],
    tools,
  });
  for await (const e of stream)
    events.push(e.type === 'content_block_delta' ? `${e.type}:${e.delta.type}` : e.type);
  const m1 = await stream.finalMessage();
  assert.equal(events, [
    'message_start',
    'content_block_start',
    'content_block_delta:input_json_delta',
    'content_block_stop',
    'message_delta',
    'message_stop',
  ]);
  assert.is(m1.stop_reason, 'tool_use');
  const use = m1.content[0]!;
  assert.ok(use.type === 'tool_use');
  assert.equal(use.input, { a: 2, b: 3 });
  assert.ok(m1.usage.input_tokens > 0);

  const texts: string[] = [];
  const stream2 = c.messages.stream({
    model: 'tiny',
    max_tokens: 100,
    messages: [
      { role: 'user', content: 'What is 2+3?' },
      { role: 'assistant', content: m1.content },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: '5' }] },
        ],
      },
    ],
    tools,
  });
  stream2.on('text', (t) => texts.push(t));
  const m2 = await stream2.finalMessage();
  assert.is(m2.content.length, 1);
  assert.ok(m2.content[0]!.type === 'text' && m2.content[0]!.text === 'The answer is 5.');
  assert.is(texts.join(''), 'The answer is 5.');
  assert.is(m2.stop_reason, 'end_turn');
  assert.is(s.session.stats.trajectories, 1);
  assert.is(s.session.stats.appended, 1);
  s.close();
});

test('stop_sequences, temperature, tool_choice any and none', async () => {
  const s = gateway.gw.openSession();
  const c = client(s.apiKey);
  const r = await c.messages.create({
    model: 'tiny',
    max_tokens: 100,
    // Sampling fields this SDK's types no longer list still reach the API, and the gateway.
    ...({ temperature: 0.5 } as object),
    stop_sequences: ['STOP'],
    messages: [{ role: 'user', content: 'say stop' }],
  });
  assert.is(r.stop_reason, 'stop_sequence');
  assert.is(r.stop_sequence, 'STOP');
  assert.equal(r.content, [{ type: 'text', text: 'one two ' }]);
  assert.is(requests.at(-1)!.gconfig?.temperature, 0.5);

  // `any` forces a call: the prompt ends with the opening of one, in the template's spelling.
  const forced = await c.messages.create({
    model: 'tiny',
    max_tokens: 100,
    messages: [{ role: 'user', content: 'What is 2+3?' }],
    tools,
    tool_choice: { type: 'any' },
  });
  assert.ok(prompts.at(-1)!.endsWith('<tool_call>{"name": "'));
  assert.is(forced.stop_reason, 'tool_use');
  const none = await c.messages.create({
    model: 'tiny',
    max_tokens: 100,
    messages: [{ role: 'user', content: 'chat only' }],
    tools,
    tool_choice: { type: 'none' },
  });
  assert.ok(!prompts.at(-1)!.includes('Tools: add'));
  assert.equal(none.content, [{ type: 'text', text: 'Hello there.' }]);
  s.close();
});

test('max_tokens: the answer is cut and says max_tokens', async () => {
  const s = gateway.gw.openSession();
  const r = await client(s.apiKey).messages.create({
    model: 'tiny',
    max_tokens: 3,
    messages: [{ role: 'user', content: 'chat only' }],
  });
  assert.is(r.stop_reason, 'max_tokens');
  assert.is(r.usage.output_tokens, 3);
  s.close();
});

test("errors in Anthropic's shape: the SDK raises its typed errors", async () => {
  const s = gateway.gw.openSession();
  const c = client(s.apiKey);
  const missing = await c.messages
    .create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }] } as never)
    .then(
      () => null,
      (e: unknown) => e,
    );
  assert.ok(missing instanceof Anthropic.BadRequestError);
  assert.is(missing.status, 400);
  assert.equal(missing.error, {
    type: 'error',
    error: {
      type: 'invalid_request_error',
      message: 'max_tokens: expected an integer, got nothing',
    },
  });
  const image = await c.messages
    .create({
      model: 'tiny',
      max_tokens: 10,
      messages: [
        {
          role: 'user',
          content: [{ type: 'image', source: { type: 'url', url: 'http://x/y.png' } }],
        },
      ],
    })
    .then(
      () => null,
      (e: unknown) => e,
    );
  assert.ok(image instanceof Anthropic.BadRequestError);
  assert.match(image.message, /messages\[0\]\.content\[0\]\.type/);
  const model = await c.messages
    .create({ model: 'claude-x', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] })
    .then(
      () => null,
      (e: unknown) => e,
    );
  assert.ok(model instanceof Anthropic.NotFoundError);
  s.close();
  const revoked = await c.messages
    .create({ model: 'tiny', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] })
    .then(
      () => null,
      (e: unknown) => e,
    );
  assert.ok(revoked instanceof Anthropic.AuthenticationError);
  assert.is((revoked.error as { error: { type: string } }).error.type, 'authentication_error');
});

test("count_tokens: the prompt in the policy's tokens", async () => {
  const s = gateway.gw.openSession();
  const c = client(s.apiKey);
  const params = {
    model: 'tiny',
    system: 'Use tools.',
    messages: [{ role: 'user' as const, content: 'What is 2+3?' }],
    tools,
  };
  const counted = await c.messages.countTokens(params);
  const r = await c.messages.create({ ...params, max_tokens: 100 });
  assert.is(counted.input_tokens, r.usage.input_tokens);
  s.close();
});

test('the gateway root works as the base URL too (Anthropic spells the /v1 itself)', async () => {
  const s = gateway.gw.openSession();
  const c = new Anthropic({
    baseURL: gateway.gw.baseURL.replace(/\/v1$/, ''),
    apiKey: s.apiKey,
    maxRetries: 0,
  });
  const r = await c.messages.create({
    model: 'tiny',
    max_tokens: 100,
    messages: [{ role: 'user', content: 'chat only' }],
  });
  assert.equal(r.content, [{ type: 'text', text: 'Hello there.' }]);
  s.close();
});

test.run();
