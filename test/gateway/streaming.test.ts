import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { streamText } from 'ai';
import type { GenerateRequest, GenerateResult, InferenceEngine } from '../../engines/types.ts';
import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import { tinyMathModelDir } from '../../model/index.ts';
import { loadTokenizer } from '../../model/tokenizer.ts';
import {
  compactToolTemplate,
  hermesCall,
  openaiClient,
  startGateway,
  suiteGateway,
  tokenizerWith,
} from './helpers.ts';

// Streaming streams: chunks leave the gateway as the engine produces tokens. A stepped engine
// produces its answer in bursts and waits for the test before each next one, so the test sees
// each chunk while the engine is provably still generating (no timing involved).
const tok = tokenizerWith(compactToolTemplate);
const bursts = ['Hello', ' world.', hermesCall('add', { a: 2, b: 3 }), ' Done.'];

class SteppedEngine implements Pick<InferenceEngine, 'generate' | 'generateN' | 'getVersion'> {
  sent = 0;
  finished = false;
  private waiting: (() => void) | undefined;

  /**
   * Lets the engine produce its next burst. It waits right after telling a burst, in the same
   * tick the chunk is written, so by the time the client has read that chunk it is waiting here.
   */
  next(): void {
    const w = this.waiting;
    this.waiting = undefined;
    w?.();
  }

  async generate(req: GenerateRequest): Promise<GenerateResult> {
    this.sent = 0;
    this.finished = false;
    const out: number[] = [];
    for (let i = 0; i < bursts.length; i++) {
      if (i > 0) await new Promise<void>((r) => (this.waiting = r));
      const ids = tok.encode(bursts[i]!);
      if (i === bursts.length - 1) ids.push(tok.eosTokenId!);
      out.push(...ids);
      this.sent++;
      req.onTokens?.({ sample: 0, tokens: ids, logprobs: ids.map(() => -0.5) });
    }
    this.finished = true;
    return {
      outputTokens: out,
      outputLogprobs: out.map(() => -0.5),
      outputVersions: out.map(() => 0),
      stopReason: 'stop',
    };
  }

  async generateN(req: GenerateRequest): Promise<GenerateResult[]> {
    return [await this.generate(req)];
  }

  getVersion(): number {
    return 0;
  }
}

const tools: OpenAI.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'add', parameters: { type: 'object', properties: {} } } },
];
const engine = new SteppedEngine();
const gateway = suiteGateway(test, { engine, tokenizer: tok });
let client: OpenAI;
test.before(() => {
  client = openaiClient(gateway.gw, gateway.gw.openSession().apiKey);
});

test('chat completions: content and tool-call deltas arrive while the engine is generating', async () => {
  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'add' }],
    tools,
    stream: true,
    logprobs: true,
  });
  const it = stream[Symbol.asyncIterator]();
  const nextChunk = async () => (await it.next()).value as OpenAI.ChatCompletionChunk;
  assert.is((await nextChunk()).choices[0]!.delta.role, 'assistant');
  let c = await nextChunk();
  assert.is(c.choices[0]!.delta.content, 'Hello');
  assert.is(c.choices[0]!.logprobs!.content!.length, tok.encode('Hello').length);
  assert.is(engine.sent, 1);
  assert.is(engine.finished, false, 'the first content left before generation ended');
  engine.next();
  c = await nextChunk();
  assert.is(c.choices[0]!.delta.content, ' world.');
  assert.is(engine.finished, false);
  engine.next();
  c = await nextChunk();
  const call = c.choices[0]!.delta.tool_calls![0]!;
  assert.is(call.function!.name, 'add');
  c = await nextChunk();
  assert.equal(JSON.parse(c.choices[0]!.delta.tool_calls![0]!.function!.arguments!), {
    a: 2,
    b: 3,
  });
  assert.is(engine.sent, 3);
  assert.is(engine.finished, false, 'the call left as its block closed');
  engine.next();
  let content = 'Hello world.';
  let finish: string | null = null;
  for (let r = await it.next(); !r.done; r = await it.next()) {
    const ch = (r.value as OpenAI.ChatCompletionChunk).choices[0]!;
    content += ch.delta.content ?? '';
    finish = ch.finish_reason ?? finish;
  }
  assert.is(engine.finished, true);
  assert.is(content, 'Hello world. Done.');
  assert.is(finish, 'tool_calls');
});

test('responses API: text deltas and the function call arrive while the engine is generating', async () => {
  const stream = await client.responses.create({
    model: 'tiny',
    input: 'add',
    tools: [{ type: 'function', name: 'add', parameters: {}, strict: false }],
    stream: true,
  });
  const events: string[] = [];
  let text = '';
  for await (const e of stream) {
    events.push(e.type);
    if (e.type === 'response.output_text.delta') {
      text += e.delta;
      if (text === 'Hello') assert.is(engine.finished, false);
      engine.next();
    }
    if (e.type === 'response.function_call_arguments.done') {
      assert.is(e.name, 'add');
      assert.is(engine.finished, false);
      engine.next();
    }
    if (e.type === 'response.completed') {
      const out = e.response.output;
      assert.equal(
        out.map((o) => o.type),
        ['message', 'function_call', 'message'],
      );
    }
  }
  assert.is(text, 'Hello world. Done.');
  assert.is(events[0], 'response.created');
  assert.is(events[events.length - 1], 'response.completed');
});

test('Vercel AI SDK streamText: the first text part arrives before generation ends', async () => {
  const provider = createOpenAI({
    baseURL: gateway.gw.baseURL,
    apiKey: gateway.gw.openSession().apiKey,
  });
  const r = streamText({ model: provider.chat('tiny'), prompt: 'hi' });
  let text = '';
  let first = true;
  for await (const part of r.fullStream) {
    if (part.type === 'tool-input-delta') engine.next();
    if (part.type !== 'text-delta') continue;
    if (first) assert.is(engine.finished, false, 'first text part before the engine finished');
    first = false;
    text += part.text;
    engine.next();
  }
  assert.is(text, 'Hello world. Done.');
});

test('builtin engine: the stream is the non-streamed answer, in one chunk per settled token', async () => {
  const chat = loadTokenizer(tinyMathModelDir);
  const builtin = await BuiltinEngine.create({ modelPath: tinyMathModelDir, seed: 3 });
  let deltas = 0;
  const counted: Pick<InferenceEngine, 'generate' | 'generateN' | 'getVersion'> = {
    generate: (req) => builtin.generate({ ...req, onTokens: (d) => (deltas++, req.onTokens?.(d)) }),
    generateN: (req) => builtin.generateN(req),
    getVersion: () => builtin.getVersion(),
  };
  const g = await startGateway({ engine: counted, tokenizer: chat, contextLength: 256 });
  try {
    const c = openaiClient(g, g.openSession().apiKey);
    const body = {
      model: 'tiny',
      messages: [{ role: 'user' as const, content: 'What is 12 + 30?' }],
      max_tokens: 24,
      temperature: 0,
    };
    const whole = await c.chat.completions.create(body);
    deltas = 0;
    const stream = await c.chat.completions.create({ ...body, stream: true });
    let content = '';
    let chunks = 0;
    for await (const ch of stream) {
      const d = ch.choices[0]?.delta.content;
      if (!d) continue;
      content += d;
      chunks++;
    }
    assert.is(content, whole.choices[0]!.message.content);
    assert.is(deltas, whole.usage!.completion_tokens, 'the engine told one token per step');
    assert.ok(chunks > 1, `content came in ${chunks} chunks`);
  } finally {
    await g.close();
    await builtin.close();
  }
});

test.run();
