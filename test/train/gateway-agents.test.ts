import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import { loadTokenizer } from '../../model/tokenizer.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { EngineGenerator } from '../fakes/token-generator.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

// Black-box agents written with the `openai` client, the Vercel AI SDK, the OpenAI Agents SDK,
// `@anthropic-ai/sdk`, LangChain.js and Mastra, trained unmodified by train_ppo through the rollout's
// gateway: sync and async, on the builtin engine and on an HTTP engine (a protocol-faithful vLLM
// fake generating with the builtin model).
process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-gateway-train-'));
let model = '';
const fixture = (name: string): string =>
  fileURLToPath(new URL(`../fixtures/agents/${name}`, import.meta.url));

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

const tiny = (agent: string, out: string): string[] =>
  tinyRunArgs(model, join(root, out), {
    'in-process': true,
    'agent-func': fixture(agent),
    'rollout-batch-size': 2,
    'train-batch-size': 4,
    'micro-train-batch-size': 4,
    'generate-max-len': 8,
    'max-steps': 2,
    'eval-dataset': false,
    'eval-prompts': 2,
  });

/** Runs train_ppo in this process; `agentEnv` is set in process.env for the agent file while it runs. */
async function run(argv: string[], agentEnv: Record<string, string> = {}) {
  // A step's metrics arrive in several calls (episodes, update, timing): one row per step.
  const rows = new Map<number, Record<string, number>>();
  const lines: string[] = [];
  Object.assign(process.env, agentEnv);
  try {
    const summary = await trainPpo(
      argv,
      {},
      {
        log: {
          line: (l) => void lines.push(l),
          metric: (s, v) => void rows.set(s, { ...rows.get(s), ...v }),
        },
      },
    );
    const steps = [...rows.values()].filter((r) => r.reward_mean !== undefined);
    return { summary, steps, lines };
  } finally {
    for (const k of Object.keys(agentEnv)) delete process.env[k];
  }
}

const agents = [
  ['openai-chat-agent.ts', 'the openai client (two chat turns)'],
  ['ai-sdk-agent.ts', 'the Vercel AI SDK (generateText with a tool)'],
  ['agents-sdk-agent.ts', 'the OpenAI Agents SDK (a function tool)'],
  ['anthropic-agent.ts', '@anthropic-ai/sdk (the Messages API with a tool)'],
  ['langchain-agent.ts', 'LangChain.js (ChatOpenAI with a bound tool)'],
  ['mastra-agent.ts', 'Mastra (an Agent with a createTool tool)'],
] as const;

for (const [file, what] of agents) {
  for (const mode of ['sync', 'async'] as const) {
    test(`train_ppo ${mode} trains an agent written with ${what}`, async () => {
      const argv = [
        ...tiny(file, `${file}-${mode}`),
        ...(mode === 'async' ? ['--async-train', '--async-num-tasks', '2'] : []),
      ];
      const { summary, steps } = await run(argv);
      assert.is(summary.steps, 2);
      assert.is(summary.episodesFailed, 0);
      assert.is(steps.length, 2);
      assert.ok(
        steps.every(
          (r) => Number.isFinite(r.policy_loss!) && r.response_length! > 0 && r.samples! >= 4,
        ),
      );
      assert.equal(
        steps.map((r) => r.version),
        [1, 2],
      );
      // Weights change only between batches in both modes: no trained sequence spans versions.
      assert.equal(
        steps.map((r) => r.version_span_max),
        [0, 0],
      );
    });
  }
}

test('async with --partial-rollout and a queue of 2: versions per token, staleness within its bound', async () => {
  const { summary, steps } = await run([
    ...tiny('openai-chat-agent.ts', 'partial'),
    '--async-train',
    '--partial-rollout',
    '--async-queue-size',
    '2',
    '--max-steps',
    '3',
  ]);
  assert.is(summary.steps, 3);
  assert.is(summary.episodesFailed, 0);
  assert.ok(
    steps.every((r) => r.staleness_max! <= 3),
    `staleness ${steps.map((r) => r.staleness_max)}`,
  );
  // Updates may land mid-episode here: a sequence may span versions, never past the bound.
  assert.ok(
    steps.every((r) => r.version_span_max! >= 0 && r.version_span_max! <= 3),
    `version spans ${steps.map((r) => r.version_span_max)}`,
  );
});

test('train_ppo trains the OpenAI Agents SDK in its default mode (Responses, previousResponseId), sync and async', async () => {
  // The shipped tool model ends its answers (a tool call, then the result) well within 48
  // tokens; an answer cut by the cap is `incomplete`, which the SDK raises as an error.
  const toolModel = fileURLToPath(
    new URL('../../model/pretrained/rtjob-tiny-tool', import.meta.url),
  );
  for (const mode of ['sync', 'async'] as const) {
    const { summary, steps } = await run([
      ...tinyRunArgs(toolModel, join(root, `responses-${mode}`), {
        'in-process': true,
        'agent-func': fixture('agents-sdk-responses-agent.ts'),
        'rollout-batch-size': 2,
        'train-batch-size': 4,
        'micro-train-batch-size': 4,
        'generate-max-len': 48,
        'max-steps': 2,
        'eval-dataset': false,
      }),
      ...(mode === 'async' ? ['--async-train', '--async-num-tasks', '2'] : []),
    ]);
    assert.is(summary.steps, 2, mode);
    assert.is(summary.episodesFailed, 0, `${mode}: no episode ended incomplete or failed`);
    assert.equal(
      steps.map((r) => r.version),
      [1, 2],
    );
    // Each episode is two runs: the second continues the first on the server's stored
    // conversation, so it extends the same trajectory (4 episodes, 4 sequences, no break).
    assert.ok(
      steps.every((r) => r.samples === 4 && r.trajectory_breaks === 0),
      `${mode}: samples ${steps.map((r) => r.samples)}, breaks ${steps.map((r) => r.trajectory_breaks)}`,
    );
    assert.ok(steps.every((r) => Number.isFinite(r.policy_loss!)));
  }
});

test('held-out evaluation of a gateway agent runs its own episodes with greedy decoding', async () => {
  const { summary, steps } = await run([
    ...tiny('greedy-probe-agent.ts', 'greedy'),
    '--eval-prompts',
    '6',
  ]);
  assert.is(summary.evalBefore, 1, 'greedy: both answers agree on every held-out prompt');
  assert.is(summary.evalAfter, 1);
  assert.ok(
    steps.every((r) => r.reward_mean! < 0.5),
    'training samples at temperature 1: answers differ',
  );
});

test('the two-turn openai agent trains on one sequence per episode holding both turns', async () => {
  const { steps } = await run(tiny('openai-chat-agent.ts', 'two-turn'));
  // 2 prompts × 2 episodes, each one trajectory extended by its second turn (two completions of ≤ 6 tokens).
  assert.ok(
    steps.every((r) => r.samples === 4),
    `samples ${steps.map((r) => r.samples)}`,
  );
  assert.ok(
    steps.some((r) => r.response_length! > 6),
    'both turns are in the trained sequence',
  );
});

test("train_ppo --engine vllm (HTTP fake) trains every client's agent, sync and async", async () => {
  const engine = await BuiltinEngine.create({ modelPath: model, seed: 1 });
  const tok = loadTokenizer(model);
  const generator = new EngineGenerator(engine, {
    eosTokenId: tok.eosTokenId!,
    decode: (ids) => tok.decode(ids),
  });
  const server = await FakeVllmServer.start({ generator, modelPath: model });
  try {
    // Every client, sync and async by turns.
    const runs = agents.map(([file], i) => [file, i % 2 ? ['--async-train'] : []] as const);
    for (const [file, extra] of runs) {
      const { summary } = await run([
        ...tiny(file, `vllm-${file}`),
        '--engine',
        'vllm',
        '--engine-url',
        server.url,
        '--engine-weights-path',
        join(root, `w-${file}`),
        ...extra,
      ]);
      assert.is(summary.steps, 2);
      assert.is(summary.episodesFailed, 0);
    }
    assert.ok(
      server.stats.generateRequests >= 8 * runs.length,
      `${server.stats.generateRequests} token-id requests reached the server`,
    );
    assert.is(
      engine.getVersion(),
      2 * runs.length,
      'each run published two versions the server reloaded',
    );
  } finally {
    await server.close();
    await engine.close();
  }
});

test('agents that throw or pass --agent-timeout are counted; the job fails only past the error budget', async () => {
  const ok = await run([
    ...tiny('flaky-gateway-agent.ts', 'flaky'),
    '--agent-error-budget',
    '0.9',
    '--rollout-batch-size',
    '4',
  ]);
  assert.is(ok.summary.steps, 2);
  assert.ok(ok.summary.episodesFailed >= 2, `${ok.summary.episodesFailed} failed`);
  assert.ok(
    ok.lines.some((l) =>
      /warn .*flaky-gateway-agent\.ts: episode of prompt \d+ threw Error: tool server down/.test(l),
    ),
  );
  const err = await run(
    [
      ...tiny('flaky-gateway-agent.ts', 'hang'),
      '--agent-timeout',
      '300',
      '--agent-error-budget',
      '0.1',
    ],
    { AGENT_HANG: '1' },
  ).then(
    () => null,
    (e: Error) => e,
  );
  assert.ok(err, 'every episode either throws or hangs: past any budget');
  assert.match(
    err.message,
    /\d+ of \d+ episodes failed \(\d+ groups? dropped with them\), past the error budget/,
  );
});

test.run();
