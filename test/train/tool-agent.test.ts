import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runGatewayEpisode } from '../../agents/agent-executor.ts';
import { loadTokenizer } from '../../model/tokenizer.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { encodeConversation, sftConversations } from '../../train/sft.ts';
import { agent, evaluate, runCalculator } from '../../examples/tool-agent.ts';
import { agent as anthropicAgent } from '../../examples/tool-agent-anthropic.ts';
import { expressionOf, toolConversation } from '../../scripts/tool-warm-start.ts';
import { arithDataset } from '../../train/data/arith.ts';
import { scriptedEngine, startGateway } from '../gateway/helpers.ts';

// examples/tool-agent.ts (the openai client, a calculator tool) and its twin written with
// @anthropic-ai/sdk (examples/tool-agent-anthropic.ts) on the shipped tool model: the calculator,
// one episode of each through the gateway with the model's own chat template, and train_ppo runs
// with tiny settings.
process.env.RTJOB_QUIET_BACKEND = '1';
const toolModel = fileURLToPath(new URL('../../model/pretrained/rtjob-tiny-tool', import.meta.url));
const agentFile = fileURLToPath(new URL('../../examples/tool-agent.ts', import.meta.url));
const anthropicFile = fileURLToPath(
  new URL('../../examples/tool-agent-anthropic.ts', import.meta.url),
);
const agents = [
  ['openai', agentFile, agent],
  ['@anthropic-ai/sdk', anthropicFile, anthropicAgent],
] as const;
const root = mkdtempSync(join(tmpdir(), 'rtjob-tool-agent-'));
test.after(() => rmSync(root, { recursive: true, force: true }));

test('the calculator evaluates + - * / and parentheses, and answers bad input with an error', () => {
  assert.is(evaluate('47+38'), 85);
  assert.is(evaluate('12+5-3'), 14);
  assert.is(evaluate('2+3*4'), 14);
  assert.is(evaluate('(2+3)*4'), 20);
  assert.is(evaluate('-7+10/4'), -4.5);
  assert.is(runCalculator('calculator', '{"expression": "6*7"}'), '42');
  assert.match(runCalculator('calculator', '{"expression": "6*"}'), /^error: unexpected end/);
  assert.match(runCalculator('calculator', '{"expr": "6"}'), /^error: expected/);
  assert.match(runCalculator('calculator', 'not json'), /^error: /);
  assert.match(runCalculator('search', '{}'), /^error: unknown tool search/);
  assert.throws(() => evaluate('process.exit()'), /unexpected p/);
});

test('the SFT data asks for one call per problem, two-step problems folded into one expression', () => {
  const recs = arithDataset({ split: 'train', size: 400 });
  const two = recs.find((r) => r.kind === 'word-2step')!;
  const expr = expressionOf(two);
  assert.match(expr, /^\d+\+\d+-\d+$/);
  assert.is(evaluate(expr), Number(two.answer));
  for (const r of recs) assert.is(evaluate(expressionOf(r)), Number(r.answer), r.prompt);
});

test('train_sft reads {messages, tools} lines: tools rendered, both assistant turns trained, the tool result not', async () => {
  const tok = loadTokenizer(toolModel);
  const file = join(root, 'sft.jsonl');
  const rec = arithDataset({ split: 'train', size: 1 })[0]!;
  writeFileSync(file, JSON.stringify(toolConversation(rec, true)) + '\n');
  const [conv] = await sftConversations(file, 1);
  assert.ok(conv!.tools?.length === 1);
  const { ids, mask } = encodeConversation(tok, conv!.messages, conv!.tools);
  const trained = tok.decode(
    ids.filter((_, i) => mask[i]),
    { skipSpecialTokens: false },
  );
  assert.is(
    trained,
    `<tool_call>{"name": "calculator", "arguments": {"expression": "${expressionOf(rec)}"}}</tool_call><|end|>${rec.direct}<|end|>`,
  );
  assert.ok(
    tok.decode(ids, { skipSpecialTokens: false }).startsWith('<|system|>tools: calculator<|user|>'),
  );
  writeFileSync(
    file,
    JSON.stringify({ ...toolConversation(rec, true), tools: 'calculator' }) + '\n',
  );
  const err = await sftConversations(file, 1).catch((e: unknown) => e);
  assert.match(String(err), /sft.jsonl:1: 'tools' must be a list/);
});

for (const [client, file, agentFn] of agents) {
  test(`one episode (${client}): the model calls the calculator, reads 85, answers; one exact-token trajectory with reward 1`, async () => {
    const tok = loadTokenizer(toolModel);
    const rec = {
      ...arithDataset({ split: 'test', size: 1 })[0]!,
      prompt: 'What is 47+38?',
      answer: '85',
      solution: '47+38=85\n#### 85',
      direct: 'The answer is 85.',
    };
    // The engine answers with exactly what the SFT data teaches, so the rendered history must extend
    // the recorded tokens turn after turn.
    const conv = toolConversation(rec, true);
    const text = tok.applyChatTemplate(conv.messages as never, {
      addGenerationPrompt: false,
      tools: conv.tools as unknown[],
    });
    const [, call, answer] = /<\|assistant\|>(.*?)<\|end\|>.*<\|assistant\|>(.*?)<\|end\|>/.exec(
      text,
    )!;
    const engine = scriptedEngine(tok, (prompt) =>
      prompt.endsWith('<|tool|>85<|assistant|>') ? answer! : call!,
    );
    const gateway = await startGateway({
      engine,
      tokenizer: tok,
      contextLength: 256,
      maxNewTokens: 48,
    });
    try {
      const trajectories = await runGatewayEpisode(
        {
          index: 0,
          prompt: rec.prompt,
          label: rec.solution,
          promptIds: [],
          nSamples: 1,
          groupId: 'g',
          record: {},
        },
        { file, agent: agentFn, gateway, signal: new AbortController().signal },
      );
      assert.is(trajectories.length, 1, 'no drift: both turns in one trajectory');
      const t = trajectories[0]!;
      assert.is(t.reward, 1);
      assert.equal(
        {
          used_tool: t.info?.used_tool,
          tool_calls: t.info?.tool_calls,
          bad_calls: t.info?.bad_calls,
          turns: t.info?.turns,
        },
        { used_tool: 1, tool_calls: 1, bad_calls: 0, turns: 2 },
      );
      assert.is(
        tok.decode(t.inputIds, { skipSpecialTokens: false }),
        text,
        'the trajectory is the SFT conversation, token for token',
      );
      const toolIds = tok.encode('<|tool|>85<|assistant|>');
      const at = t.inputIds.findIndex((_, i) => toolIds.every((id, k) => t.inputIds[i + k] === id));
      assert.ok(at > 0);
      assert.equal(
        t.lossMask.slice(at, at + toolIds.length),
        toolIds.map(() => 0),
        'the tool result is not trained on',
      );
    } finally {
      await gateway.close();
    }
  });
}

const evalBefore: Record<string, number | undefined> = {};
const runs = [
  ['builtin', 'openai', agentFile],
  ['llamacpp', 'openai', agentFile],
  ['builtin', '@anthropic-ai/sdk', anthropicFile],
] as const;
for (const [engine, client, file] of runs) {
  test(`train_ppo --engine ${engine} runs the ${client} tool agent on the shipped tool model and logs the tool-use rate`, async () => {
    // A step's metrics arrive in more than one call (episodes, then the update): merged by step.
    const byStep = new Map<number, Record<string, number>>();
    const summary = await trainPpo(
      [
        '--in-process',
        '--engine',
        engine,
        '--pretrain',
        toolModel,
        '--agent-func',
        file,
        '--rollout-batch-size',
        '2',
        '--n-samples-per-prompt',
        '4',
        '--train-batch-size',
        '8',
        '--micro-train-batch-size',
        '8',
        '--max-steps',
        '2',
        '--eval-prompts',
        '4',
        '--save-path',
        join(root, `out-${engine}-${client.replace(/\W/g, '')}`),
      ],
      {},
      {
        log: {
          line: () => undefined,
          metric: (s, v) => void byStep.set(s, { ...byStep.get(s), ...v }),
        },
      },
    );
    assert.is(summary.steps, 2);
    const steps = [...byStep.values()].filter((r) => r.reward_mean !== undefined);
    assert.is(steps.length, 2);
    for (const r of steps) {
      assert.ok(
        r['info/used_tool']! >= 0 && r['info/used_tool']! <= 1,
        'tool-use rate logged each step',
      );
      assert.ok(r['info/turns']! >= 1);
      assert.ok(!Object.keys(r).some((k) => k.startsWith('info_')), 'extraInfo under one name');
    }
    assert.ok(
      summary.evalBefore !== undefined && summary.evalAfter !== undefined,
      'held-out evaluation ran the agent',
    );
    assert.is(summary.episodesFailed, 0);
    // Held-out evaluation decodes greedily: an f32 GGUF gives the builtin engine's episodes, and
    // the Messages API renders the same prompts as chat completions, so the two clients' agents
    // score the same before training.
    if (engine === 'builtin' && client === 'openai') evalBefore.builtin = summary.evalBefore;
    else assert.is(summary.evalBefore, evalBefore.builtin);
  });
}

test.run();
