// Weight updates in the middle of a gateway episode (gateway/README.md, "Weight updates
// mid-episode"): a real builtin engine on the shipped tiny model, an agent's client (`openai`,
// `@anthropic-ai/sdk`) making two turns, and the test loading new weights at a chosen token of the
// first answer and again between the turns. Every recorded token must carry the version of the
// weights that computed it, and the tokens after the update must be the new weights' own
// continuation (interruptible generation: the rows in flight are prefilled again on the new
// weights, no token comes from a cache of the old ones).
import Anthropic from '@anthropic-ai/sdk';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import type { GenerateRequest, TokenDelta } from '../../engines/types.ts';
import type { GatewayEngine } from '../../gateway/completion.ts';
import { tinyMathModelDir } from '../../model/index.ts';
import type { NamedTensors } from '../../model/tensors.ts';
import { loadTokenizer } from '../../model/tokenizer.ts';
import type { Trajectory } from '../../algorithms/trajectory.ts';
import { openaiClient, startGateway } from './helpers.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const tok = loadTokenizer(tinyMathModelDir);
const meta = { groupId: 'g', promptIndex: 0 };

/** The weights of `base` moved a little, deterministically per version, so versions answer apart. */
function weightsOf(base: NamedTensors, version: number): NamedTensors {
  const out: NamedTensors = {};
  for (const [name, t] of Object.entries(base)) {
    const data = new Float32Array(t.data.length);
    for (let i = 0; i < data.length; i++)
      data[i] = t.data[i]! * (1 + 0.2 * Math.sin(version * 7.1 + i * 0.37));
    out[name] = { shape: [...t.shape], data };
  }
  return out;
}

/**
 * The builtin engine behind a hook that sees every token of every request as it is sampled: the
 * test loads new weights from it at an exact point of an answer (a listener runs inside the
 * engine's decode step, so the update lands before the next token, deterministically).
 */
function hooked(
  engine: BuiltinEngine,
  onToken: (request: number, generated: number) => void,
): GatewayEngine {
  let requests = 0;
  const watch = (req: GenerateRequest): GenerateRequest => {
    const request = ++requests;
    let generated = 0;
    return {
      ...req,
      onTokens: (d: TokenDelta) => {
        req.onTokens?.(d);
        generated += d.tokens.length;
        onToken(request, generated);
      },
    };
  };
  return {
    kind: engine.kind,
    maxTopLogprobs: engine.maxTopLogprobs,
    getVersion: () => engine.getVersion(),
    generate: (req) => engine.generate(watch(req)),
    generateN: (req) => engine.generateN(watch(req)),
  };
}

/** The completions' tokens of a trajectory in order: ids, versions and their prompt before them. */
function generated(t: Trajectory): { ids: number[]; versions: number[]; firstAt: number } {
  const at = t.lossMask.flatMap((m, i) => (m === 1 ? [i] : []));
  return {
    ids: at.map((i) => t.inputIds[i]!),
    versions: at.map((i) => t.versions[i]!),
    firstAt: at[0]!,
  };
}

const fill = (n: number, v: number): number[] => Array<number>(n).fill(v);

async function setup(at: number) {
  const engine = await BuiltinEngine.create({ modelPath: tinyMathModelDir, seed: 3 });
  const base = engine.exportWeights();
  const updates: number[] = [];
  const load = (version: number): Promise<void> => {
    updates.push(version);
    return engine.updateWeights({ kind: 'tensors', tensors: weightsOf(base, version) }, version);
  };
  // Version 1 lands while the first request has generated `at` tokens.
  const gw = await startGateway({
    engine: hooked(engine, (request, n) => {
      if (request === 1 && n === at) void load(1);
    }),
    tokenizer: tok,
    contextLength: 256,
  });
  return { engine, gw, load, updates };
}

/** Greedy tokens of the engine's current weights continuing `ids`. */
async function continuation(engine: BuiltinEngine, ids: number[], n: number): Promise<number[]> {
  const r = await engine.generate({ inputIds: ids, gconfig: { greedy: true, maxNewTokens: n } });
  return r.outputTokens;
}

test('openai chat: an update mid-answer and one between turns; each token keeps the version that computed it', async () => {
  const at = 3;
  const { engine, gw, load, updates } = await setup(at);
  try {
    const s = gw.openSession();
    const client = openaiClient(gw, s.apiKey);
    const first = [{ role: 'user' as const, content: 'What is 12 + 30?' }];
    const r1 = await client.chat.completions.create({
      model: 'tiny',
      messages: first,
      max_tokens: 24,
      temperature: 0,
    });
    const n1 = r1.usage!.completion_tokens;
    assert.ok(n1 > at, `the first answer (${n1} tokens) ran past the update`);
    assert.equal(updates, [1]);
    const [t1] = s.session.trajectories(1, meta);
    const g1 = generated(t1!);
    assert.equal(g1.versions, [...fill(at, 0), ...fill(n1 - at, 1)]);
    // After the update the answer is version 1's own greedy continuation of the first tokens.
    const prompt = t1!.inputIds.slice(0, g1.firstAt);
    assert.equal(
      g1.ids.slice(at),
      await continuation(engine, [...prompt, ...g1.ids.slice(0, at)], n1 - at),
    );

    await load(2);
    const r2 = await client.chat.completions.create({
      model: 'tiny',
      messages: [
        ...first,
        { role: 'assistant', content: r1.choices[0]!.message.content },
        { role: 'user', content: 'And 5 + 5?' },
      ],
      max_tokens: 24,
      temperature: 0,
    });
    const n2 = r2.usage!.completion_tokens;
    const ts = s.session.trajectories(1, meta);
    assert.is(ts.length, 1, 'the second turn extends the first: one trajectory');
    assert.equal(generated(ts[0]!).versions, [...fill(at, 0), ...fill(n1 - at, 1), ...fill(n2, 2)]);
    assert.equal(updates, [1, 2]);
  } finally {
    await gw.close();
    await engine.close();
  }
});

test('@anthropic-ai/sdk streaming: the stream is the answer, and its tokens change version where the weights did', async () => {
  const at = 5;
  const { engine, gw, load } = await setup(at);
  try {
    const s = gw.openSession();
    const client = new Anthropic({ baseURL: gw.baseURL, apiKey: s.apiKey, maxRetries: 0 });
    const first = [{ role: 'user' as const, content: 'What is 7 + 8?' }];
    let streamed = '';
    const stream = client.messages.stream({
      model: 'tiny',
      max_tokens: 24,
      top_k: 1, // greedy: the answer runs past the update
      messages: first,
    });
    stream.on('text', (d) => (streamed += d));
    const m1 = await stream.finalMessage();
    const text1 = m1.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    assert.is(streamed, text1);
    const n1 = m1.usage.output_tokens;
    assert.ok(n1 > at, `the first answer (${n1} tokens) ran past the update`);
    const g1 = generated(s.session.trajectories(1, meta)[0]!);
    assert.equal(g1.versions, [...fill(at, 0), ...fill(n1 - at, 1)]);

    await load(2);
    const m2 = await client.messages.create({
      model: 'tiny',
      max_tokens: 24,
      messages: [
        ...first,
        { role: 'assistant', content: text1 },
        { role: 'user', content: 'And 2 + 2?' },
      ],
    });
    const ts = s.session.trajectories(1, meta);
    assert.is(ts.length, 1);
    assert.equal(generated(ts[0]!).versions, [
      ...fill(at, 0),
      ...fill(n1 - at, 1),
      ...fill(m2.usage.output_tokens, 2),
    ]);
  } finally {
    await gw.close();
    await engine.close();
  }
});

test('an engine paused (abort) for an update mid-answer: the gateway continues the answer on the new weights', async () => {
  const at = 4;
  const engine = await BuiltinEngine.create({ modelPath: tinyMathModelDir, seed: 3 });
  const v1 = weightsOf(engine.exportWeights(), 1);
  // A run that pauses its engines for the update: the answer in flight returns `abort` with its
  // tokens so far, and the gateway sends the rest again once the engine resumes. The pause is
  // taken right after the decode step that told the `at`-th token.
  const gw = await startGateway({
    engine: hooked(engine, (request, n) => {
      if (request !== 1 || n !== at) return;
      void Promise.resolve()
        .then(() => engine.pause({ mode: 'abort' }))
        .then(() => engine.updateWeights({ kind: 'tensors', tensors: v1 }, 1))
        .then(() => engine.resume());
    }),
    tokenizer: tok,
    contextLength: 256,
  });
  try {
    const s = gw.openSession();
    const client = openaiClient(gw, s.apiKey);
    const r = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'What is 12 + 30?' }],
      max_tokens: 24,
      temperature: 0,
    });
    const n = r.usage!.completion_tokens;
    assert.ok(n > at, `the answer (${n} tokens) ran past the pause`);
    const ts = s.session.trajectories(1, meta);
    assert.is(ts.length, 1, 'one answer, one trajectory');
    const g = generated(ts[0]!);
    assert.equal(g.versions, [...fill(at, 0), ...fill(n - at, 1)]);
    const prompt = ts[0]!.inputIds.slice(0, g.firstAt);
    assert.equal(
      g.ids.slice(at),
      await continuation(engine, [...prompt, ...g.ids.slice(0, at)], n - at),
    );
  } finally {
    await gw.close();
    await engine.close();
  }
});

test.run();
