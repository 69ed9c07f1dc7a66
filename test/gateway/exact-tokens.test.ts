import { test } from 'uvu';
import * as assert from 'uvu/assert';
import OpenAI from 'openai';
import type { Trajectory } from '../../algorithms/trajectory.ts';
import type { ChatTokenizer } from '../../model/tokenizer.ts';
import {
  compactToolTemplate,
  hermesCall,
  historyEditingTemplate,
  openaiClient,
  qwenStyleTemplate,
  scriptedEngine,
  startGateway,
  tokenizerWith,
} from './helpers.ts';

// Exact tokens across turns: what the gateway records for training is the engine's own ids,
// one trajectory per conversation as long as each prompt extends the last, with everything the
// model did not generate masked out of the loss.
const tools: OpenAI.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'add', parameters: { type: 'object' } } },
];
const meta = { groupId: 'g', promptIndex: 0 };

function generated(tok: ChatTokenizer, t: Trajectory): string {
  return tok.decode(t.inputIds.filter((_, i) => t.lossMask[i] === 1));
}

/** An agent loop: call the model, run `add` for every tool call, until it answers in text. */
async function toolLoop(
  client: OpenAI,
  first: string,
): Promise<{ messages: OpenAI.ChatCompletionMessageParam[]; answer: string }> {
  const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: first }];
  for (;;) {
    const r = await client.chat.completions.create({ model: 'tiny', messages, tools });
    const m = r.choices[0]!.message;
    messages.push(m);
    if (!m.tool_calls?.length) return { messages, answer: m.content ?? '' };
    for (const c of m.tool_calls) {
      const { a, b } = JSON.parse(
        (c as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments,
      ) as { a: number; b: number };
      messages.push({ role: 'tool', tool_call_id: c.id, content: String(a + b) });
    }
  }
}

/** The model adds 1 four times (one call per turn), then answers: five completions. */
function countingReply(style: 'compact' | 'qwen') {
  return (prompt: string): string => {
    const done = (prompt.match(/<tool_response>/g) ?? []).length;
    if (done >= 4) return 'Done: 4.';
    const call = hermesCall('add', { a: done, b: 1 });
    return style === 'compact'
      ? call
      : call.replace('<tool_call>', '<tool_call>\n').replace('</tool_call>', '\n</tool_call>');
  };
}

for (const [name, template, style] of [
  ['compact Hermes template', compactToolTemplate, 'compact'],
  ['Qwen-style template (a newline after every end token)', qwenStyleTemplate, 'qwen'],
] as const) {
  test(`${name}: a 5-turn tool conversation is one trajectory with the engine's tokens`, async () => {
    const tok = tokenizerWith(template);
    const outputs: number[][] = [];
    const inner = scriptedEngine(tok, countingReply(style));
    const engine = {
      generate: async (req: Parameters<typeof inner.generate>[0]) => {
        const r = await inner.generate(req);
        outputs.push(r.outputTokens);
        return r;
      },
      generateN: inner.generateN.bind(inner),
      getVersion: () => 7,
    };
    const gw = await startGateway({ engine, tokenizer: tok, checkDrift: true });
    try {
      const s = gw.openSession();
      const client = openaiClient(gw, s.apiKey);
      const { messages, answer } = await toolLoop(client, 'Count to four.');
      assert.is(answer, 'Done: 4.');
      assert.is(outputs.length, 5);
      assert.equal(s.session.stats, {
        completions: 5,
        appended: 4,
        bridged: 0,
        trajectories: 1,
        aborted: 0,
        breaks: [],
        drift: [],
      });
      const [t] = s.session.trajectories(1, meta);
      assert.ok(t);
      // Exactly the engine's ids, in order, are trained on.
      assert.equal(
        t.inputIds.filter((_, i) => t.lossMask[i] === 1),
        outputs.flat(),
      );
      assert.ok(t.logprobs.every((lp, i) => lp === (t.lossMask[i] ? -0.25 : 0)));
      // The whole sequence is what the template renders for the finished conversation.
      const final = messages.slice(0, -1).map((m) => ({
        ...m,
        ...('tool_calls' in m && m.tool_calls
          ? {
              tool_calls: m.tool_calls.map((c) => ({
                ...c,
                function: {
                  ...(c as OpenAI.ChatCompletionMessageFunctionToolCall).function,
                  arguments: JSON.parse(
                    (c as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments,
                  ),
                },
              })),
            }
          : {}),
      }));
      const rendered = tok.applyChatTemplate(final as never, { tools });
      assert.is(tok.decode(t.inputIds), rendered + 'Done: 4.<|end|>');
      // Tool results and template glue are masked; the first prompt too.
      const masked = tok.decode(t.inputIds.filter((_, i) => t.lossMask[i] === 0));
      assert.ok(
        masked.includes(
          style === 'compact'
            ? '<tool_response>3</tool_response>'
            : '<tool_response>\n3\n</tool_response>',
        ),
      );
      if (style === 'qwen') {
        // The newline the template writes after each end token sits right after the model's EOS, masked.
        const eos = tok.eosTokenId!;
        const afterEos = t.inputIds
          .flatMap((id, i) => (id === eos && t.lossMask[i] === 1 ? [i + 1] : []))
          .filter((i) => i < t.inputIds.length);
        assert.is(afterEos.length, 4);
        for (const i of afterEos) {
          assert.is(tok.decode([t.inputIds[i]!]), '\n');
          assert.is(t.lossMask[i], 0);
        }
      }
      assert.ok(t.versions.every((v, i) => v === (t.lossMask[i] ? 0 : -1)));
    } finally {
      await gw.close();
    }
  });
}

test('without bridge mode, a template that rewrites history starts a new trajectory (a break); both share the reward; drift is reported', async () => {
  const tok = tokenizerWith(historyEditingTemplate);
  const engine = scriptedEngine(tok, (p) =>
    p.endsWith('again<|assistant|>') ? '<think>still</think>5' : '<think>2+2</think>4',
  );
  const gw = await startGateway({ engine, tokenizer: tok, checkDrift: true, bridge: false });
  try {
    const s = gw.openSession();
    const client = openaiClient(gw, s.apiKey);
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: '2+2?' }];
    const r1 = await client.chat.completions.create({ model: 'tiny', messages });
    messages.push(
      { role: 'assistant', content: r1.choices[0]!.message.content! },
      { role: 'user', content: 'again' },
    );
    await client.chat.completions.create({ model: 'tiny', messages });
    const stats = s.session.stats;
    assert.is(stats.trajectories, 2);
    assert.is(stats.appended, 0);
    assert.equal(stats.breaks, [{ completion: 1, reason: 'bridge mode is off' }]);
    assert.is(stats.drift.length, 1);
    assert.is(stats.drift[0]!.kind, 'generated', 'the template dropped what the model generated');
    assert.match(stats.drift[0]!.recorded, /<think>/);
    const ts = s.session.trajectories(0.5, meta);
    assert.equal(
      ts.map((t) => t.reward),
      [0.5, 0.5],
    );
    assert.is(generated(tok, ts[0]!), '<think>2+2</think>4<|end|>');
    assert.is(generated(tok, ts[1]!), '<think>still</think>5<|end|>');
    assert.is(
      tok.decode(ts[1]!.inputIds),
      '<|user|>2+2?<|assistant|>4<|end|><|user|>again<|assistant|><think>still</think>5<|end|>',
    );
    // With a per-completion discount, the earlier trajectory gets less.
    assert.equal(
      s.session.trajectories(1, meta, 0.5).map((t) => t.reward),
      [0.5, 1],
    );
  } finally {
    await gw.close();
  }
});

test("the model's own ids are kept even when re-tokenizing its text would give others (bridged)", async () => {
  const tok = tokenizerWith(compactToolTemplate);
  // The model spells '<|user|>' out of single characters; the tokenizer would read it as one special token.
  const spelled = [...'<|user|>'].map((c) => tok.encode(c)[0]!);
  const { SimulatedEngine } = await import('../../engines/simulated/simulated-engine.ts');
  const engine = new SimulatedEngine({ respond: () => [...spelled, tok.eosTokenId!] });
  const gw = await startGateway({ engine, tokenizer: tok, checkDrift: true });
  try {
    const s = gw.openSession();
    const client = openaiClient(gw, s.apiKey);
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'x' }];
    const r = await client.chat.completions.create({ model: 'tiny', messages });
    assert.is(r.choices[0]!.message.content, '<|user|>');
    messages.push({ role: 'assistant', content: '<|user|>' }, { role: 'user', content: 'y' });
    await client.chat.completions.create({ model: 'tiny', messages });
    const ts = s.session.trajectories(1, meta);
    // The re-rendered prompt differs in tokens; bridge mode continues from the recorded ones.
    assert.is(ts.length, 1);
    assert.equal(
      ts[0]!.inputIds.filter((_, i) => ts[0]!.lossMask[i] === 1),
      [...spelled, tok.eosTokenId!, ...spelled, tok.eosTokenId!],
    );
    assert.is(s.session.stats.bridged, 1);
    assert.is(s.session.stats.drift[0]!.kind, 'generated');
  } finally {
    await gw.close();
  }
});

test('parallel calls within one episode: each its own trajectory, continued by whichever extends it; sessions are isolated', async () => {
  const tok = tokenizerWith(compactToolTemplate);
  const engine = scriptedEngine(
    tok,
    (p) => (p.includes('left') ? 'L' : 'R') + (p.match(/<\|assistant\|>/g) ?? []).length,
  );
  const gw = await startGateway({ engine, tokenizer: tok });
  try {
    const a = gw.openSession();
    const b = gw.openSession();
    const ca = openaiClient(gw, a.apiKey);
    const cb = openaiClient(gw, b.apiKey);
    const ask = (c: OpenAI, messages: OpenAI.ChatCompletionMessageParam[]) =>
      c.chat.completions
        .create({ model: 'tiny', messages })
        .then((r) => r.choices[0]!.message.content!);
    const left: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'left' }];
    const right: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'right' }];
    // Two conversations at once in episode a, and the same prompt twice at once.
    const [l1, r1, r1b] = await Promise.all([ask(ca, left), ask(ca, right), ask(ca, right)]);
    assert.equal([l1, r1, r1b], ['L1', 'R1', 'R1']);
    assert.is(
      a.session.stats.trajectories,
      3,
      'a parallel request never extends a trajectory another is extending',
    );
    left.push({ role: 'assistant', content: l1 }, { role: 'user', content: 'more' });
    right.push({ role: 'assistant', content: r1 }, { role: 'user', content: 'more' });
    const [l2, r2] = await Promise.all([ask(ca, left), ask(ca, right)]);
    assert.equal([l2, r2], ['L2', 'R2']);
    assert.equal(a.session.stats, {
      completions: 5,
      appended: 2,
      bridged: 0,
      trajectories: 3,
      aborted: 0,
      breaks: [],
      drift: [],
    });
    const texts = a.session.trajectories(1, meta).map((t) => generated(tok, t));
    assert.equal(texts.sort(), ['L1<|end|>L2<|end|>', 'R1<|end|>', 'R1<|end|>R2<|end|>'].sort());
    // Episode b extends nothing of a's, though its prompt is a's prefix.
    await ask(cb, left);
    assert.equal(b.session.stats, {
      completions: 1,
      appended: 0,
      bridged: 0,
      trajectories: 1,
      aborted: 0,
      breaks: [],
      drift: [],
    });
    assert.is(a.session.stats.completions, 5);
    // A closed session's key is refused.
    a.close();
    const err = await ask(ca, left).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(err instanceof OpenAI.AuthenticationError);
    assert.is(gw.openSessions, 1);
  } finally {
    await gw.close();
  }
});

test('a request the agent aborted is not recorded: a completion it never saw is not trained on', async () => {
  const tok = tokenizerWith(compactToolTemplate);
  const inner = scriptedEngine(tok, () => 'seen');
  let calls = 0;
  let started!: () => void;
  const isStarted = new Promise<void>((resolve) => (started = resolve));
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const engine = {
    generate: async (req: Parameters<typeof inner.generate>[0]) => {
      if (++calls === 1) {
        started();
        await held;
      } else release();
      return inner.generate(req);
    },
    generateN: inner.generateN.bind(inner),
    getVersion: () => 0,
  };
  const gw = await startGateway({ engine, tokenizer: tok });
  try {
    const s = gw.openSession();
    const client = openaiClient(gw, s.apiKey);
    const ac = new AbortController();
    const first = client.chat.completions.create(
      { model: 'tiny', messages: [{ role: 'user', content: 'a' }] },
      { signal: ac.signal },
    );
    await isStarted;
    ac.abort();
    assert.ok(
      await first.then(
        () => false,
        (e: Error) => e instanceof OpenAI.APIUserAbortError,
      ),
    );
    await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'b' }],
    });
    assert.is(s.session.stats.completions, 1);
    assert.is(
      tok.decode(s.session.trajectories(1, meta)[0]!.inputIds),
      '<|user|>b<|assistant|>seen<|end|>',
    );
  } finally {
    await gw.close();
  }
});

test.run();
