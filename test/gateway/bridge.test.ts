import { test } from 'uvu';
import * as assert from 'uvu/assert';
import OpenAI from 'openai';
import type { GenerateRequest } from '../../engines/types.ts';
import { loadTokenizer } from '../../model/tokenizer.ts';
import { qwen3TokenizerDir } from '../fixtures/model/qwen3.ts';
import {
  historyEditingTemplate,
  openaiClient,
  scriptedEngine,
  startGateway,
  tokenizerWith,
} from './helpers.ts';

// Bridge mode: Qwen3's own chat template drops the thinking of assistant turns before the last
// user query, so each new user turn re-renders history that no longer extends the recorded
// tokens. Bridged, the conversation stays one trajectory and the engine is given the recorded
// ids (its own thinking included) + the rendered new messages; without it, every such turn breaks.
// An agent that edits its history is never bridged: it breaks, with the reason.
const qwen = loadTokenizer(qwen3TokenizerDir());
const tools: OpenAI.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'add', parameters: { type: 'object' } } },
];
const meta = { groupId: 'g', promptIndex: 0 };

/** Thinks, calls `add` once per user turn, then answers with the tool's result. */
function thinkingModel(prompt: string): string {
  if (prompt.endsWith('</tool_response><|im_end|>\n<|im_start|>assistant\n'))
    return '<think>\nThe tool said so.\n</think>\n\nIt is 5.';
  const turn = (prompt.match(/<\|im_start\|>user\n(?!\n<tool_response>)/g) ?? []).length;
  return `<think>\nTurn ${turn}: I should add.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>`;
}

/** Three user turns, each with one tool round: six completions; `extra` goes into every body. */
async function threeTurns(client: OpenAI, extra: Record<string, unknown> = {}): Promise<void> {
  const messages: OpenAI.ChatCompletionMessageParam[] = [];
  for (const q of ['What is 2+3?', 'Are you sure?', 'Once more?']) {
    messages.push({ role: 'user', content: q });
    for (;;) {
      const body = { model: 'tiny', messages, tools, ...extra };
      const r = await client.chat.completions.create(body);
      const m = r.choices[0]!.message;
      messages.push(m);
      if (!m.tool_calls?.length) break;
      for (const c of m.tool_calls)
        messages.push({ role: 'tool', tool_call_id: c.id, content: '5' });
    }
  }
}

/** Answers without thinking (the template's generation prompt closes an empty `<think>`). */
function plainModel(prompt: string): string {
  const asked = prompt.replace(/<think>\n\n<\/think>\n\n$/, '');
  return thinkingModel(asked).replace(/<think>[\s\S]*<\/think>\n\n/, '');
}

function recordingEngine(seen: number[][], model = thinkingModel) {
  const inner = scriptedEngine(qwen, model);
  return {
    generate: (req: GenerateRequest) => (seen.push(req.inputIds), inner.generate(req)),
    generateN: inner.generateN.bind(inner),
    getVersion: () => 0,
  };
}

test('Qwen3 template that drops past thinking: bridged, three user turns are one trajectory', async () => {
  const seen: number[][] = [];
  const gw = await startGateway({ engine: recordingEngine(seen), tokenizer: qwen });
  try {
    const s = gw.openSession();
    await threeTurns(openaiClient(gw, s.apiKey));
    const st = s.session.stats;
    assert.is(st.completions, 6);
    assert.is(st.trajectories, 1);
    // Each turn from the second user query on is bridged: the re-rendered history has dropped
    // the first turn's thinking that the recorded ids hold.
    assert.is(st.bridged, 4);
    assert.equal(st.breaks, []);
    const [t] = s.session.trajectories(1, meta);
    // Each prompt the engine got extends the one before it with that answer: one sequence.
    for (let i = 1; i < seen.length; i++)
      assert.ok(
        seen[i]!.length > seen[i - 1]!.length && seen[i - 1]!.every((id, k) => seen[i]![k] === id),
        `prompt ${i} extends prompt ${i - 1}`,
      );
    const text = qwen.decode(t!.inputIds, { skipSpecialTokens: false });
    // The model keeps seeing its first turn's thinking, which a re-render would have dropped.
    assert.match(text, /Turn 1: I should add\.[\s\S]*Once more\?/);
    assert.ok(text.endsWith('It is 5.<|im_end|>'));
    // Only the model's tokens are trained; what the bridge added between turns is masked.
    const trained = qwen.decode(
      t!.inputIds.filter((_, i) => t!.lossMask[i] === 1),
      { skipSpecialTokens: false },
    );
    assert.not.match(trained, /Are you sure\?|tool_response/);
    assert.is((trained.match(/<\|im_end\|>/g) ?? []).length, 6);
  } finally {
    await gw.close();
  }
});

test('Qwen3 template without bridge mode: every new user turn breaks the trajectory', async () => {
  const gw = await startGateway({ engine: recordingEngine([]), tokenizer: qwen, bridge: false });
  try {
    const s = gw.openSession();
    await threeTurns(openaiClient(gw, s.apiKey));
    const st = s.session.stats;
    assert.is(st.trajectories, 3);
    assert.equal(
      st.breaks.map((b) => b.reason),
      ['bridge mode is off', 'bridge mode is off'],
    );
  } finally {
    await gw.close();
  }
});

test('Qwen3 with chat_template_kwargs enable_thinking false: bridged, one trajectory; without bridging, every request after the first breaks', async () => {
  // The generation prompt ends with an empty `<think>\n\n</think>\n\n` the re-rendered history
  // leaves out, so no later prompt extends the recorded tokens (not even within a tool round).
  const noThinking = { chat_template_kwargs: { enable_thinking: false } };
  for (const bridge of [true, false]) {
    const seen: number[][] = [];
    const gw = await startGateway({
      engine: recordingEngine(seen, plainModel),
      tokenizer: qwen,
      bridge,
    });
    try {
      const s = gw.openSession();
      await threeTurns(openaiClient(gw, s.apiKey), noThinking);
      assert.ok(
        qwen.decode(seen[0]!, { skipSpecialTokens: false }).endsWith('<think>\n\n</think>\n\n'),
        'the kwarg reached the template',
      );
      const st = s.session.stats;
      assert.is(st.completions, 6);
      if (bridge) {
        assert.is(st.trajectories, 1);
        assert.is(st.bridged, 5);
        assert.equal(st.breaks, []);
      } else {
        assert.is(st.trajectories, 6);
        assert.is(st.breaks.length, 5);
      }
    } finally {
      await gw.close();
    }
  }
});

test('chat_template_kwargs that would set what the gateway renders with is a 400 naming it', async () => {
  const gw = await startGateway({ engine: recordingEngine([]), tokenizer: qwen });
  try {
    const s = gw.openSession();
    const client = openaiClient(gw, s.apiKey);
    const body = {
      model: 'tiny',
      messages: [{ role: 'user' as const, content: 'hi' }],
      chat_template_kwargs: { eos_token: '' },
    };
    const err = await client.chat.completions.create(body).catch((e: unknown) => e);
    assert.instance(err, OpenAI.BadRequestError);
    assert.is(
      (err as InstanceType<typeof OpenAI.BadRequestError>).param,
      'chat_template_kwargs.eos_token',
    );
  } finally {
    await gw.close();
  }
});

test('an agent that edits history or rewrites an answer is not bridged: a break, with the reason', async () => {
  // A template that drops earlier thinking, so no later prompt extends the recorded tokens.
  const tok = tokenizerWith(historyEditingTemplate);
  const engine = scriptedEngine(tok, () => '<think>t</think>abcdefgh');
  const gw = await startGateway({ engine, tokenizer: tok });
  try {
    const s = gw.openSession();
    const client = openaiClient(gw, s.apiKey);
    const ask = (messages: OpenAI.ChatCompletionMessageParam[], stop?: string) =>
      client.chat.completions
        .create({ model: 'tiny', messages, ...(stop ? { stop } : {}) })
        .then((r) => r.choices[0]!.message.content!);
    const a1 = await ask([{ role: 'user', content: 'Hi' }]);
    // Edits its first message.
    await ask([
      { role: 'user', content: 'Hello' },
      { role: 'assistant', content: a1 },
      { role: 'user', content: 'And?' },
    ]);
    // Rewrites the answer it got.
    const b1 = await ask([{ role: 'user', content: 'Yo' }]);
    await ask([
      { role: 'user', content: 'Yo' },
      { role: 'assistant', content: b1.toUpperCase() },
      { role: 'user', content: 'And?' },
    ]);
    // An answer cut by a stop string has no end token to bridge on.
    const c1 = await ask([{ role: 'user', content: 'short' }], 'fg');
    assert.is(c1, '<think>t</think>abcde');
    await ask([
      { role: 'user', content: 'short' },
      { role: 'assistant', content: c1 },
      { role: 'user', content: 'And?' },
    ]);
    const st = s.session.stats;
    assert.is(st.bridged, 0);
    assert.equal(
      st.breaks.map((b) => b.reason),
      [
        'messages[0] differs from the recorded history (the agent edited it)',
        'messages[1] is not the answer the gateway gave (the agent rewrote it)',
        'the answer did not end with the end token (cut by max_tokens or a stop string)',
      ],
    );
    assert.is(st.trajectories, 6);
  } finally {
    await gw.close();
  }
});

test.run();
