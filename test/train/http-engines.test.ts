import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import { loadTokenizer } from '../../model/tokenizer.ts';
import { pidAlive } from '../../runtime/pid.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import type { FakeServer } from '../fakes/fake-server.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { EngineGenerator } from '../fakes/token-generator.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

// train_ppo with --engine sglang|vllm against protocol-faithful fake servers that generate with
// the builtin TF.js model, so weight reloads from disk change what they generate; and with
// --engine-launch, which starts a fake server process per rollout and stops it with the run.
process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-http-train-'));
let model = '';
const fixture = (name: string): string =>
  fileURLToPath(new URL(`../fixtures/agents/${name}`, import.meta.url));

/** Two short steps of a multi-turn agent: the run every test here makes against its servers. */
const twoShortSteps = {
  'agent-func': fixture('multi-turn-step.ts'),
  'rollout-batch-size': 2,
  'train-batch-size': 4,
  'micro-train-batch-size': 4,
  'generate-max-len': 6,
  'max-steps': 2,
  'eval-dataset': false,
};

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

async function modelGenerator(): Promise<{ generator: EngineGenerator; engine: BuiltinEngine }> {
  const engine = await BuiltinEngine.create({ modelPath: model, seed: 1 });
  const tok = loadTokenizer(model);
  return {
    engine,
    generator: new EngineGenerator(engine, {
      eosTokenId: tok.eosTokenId!,
      decode: (ids) => tok.decode(ids),
    }),
  };
}

for (const kind of ['sglang', 'vllm'] as const) {
  test(`train_ppo --engine ${kind} against a fake server completes, reloads weights, and logs metrics`, async () => {
    const { generator, engine } = await modelGenerator();
    const server: FakeServer =
      kind === 'sglang'
        ? await FakeSglangServer.start({ generator, modelPath: model })
        : await FakeVllmServer.start({ generator, modelPath: model });
    const rows: Record<string, number>[] = [];
    const weights = join(root, `${kind}-weights`);
    try {
      const s = await trainPpo(
        tinyRunArgs(model, join(root, `${kind}-out`), {
          'in-process': true,
          engine: kind,
          'engine-url': server.url,
          'engine-weights-path': weights,
          ...twoShortSteps,
          'eval-prompts': 2,
        }),
        {},
        { log: { line: () => undefined, metric: (_s, v) => void rows.push(v) } },
      );
      assert.is(s.steps, 2);
      assert.ok(s.evalAfter !== undefined);
      const steps = rows.filter((r) => r.reward_mean !== undefined);
      assert.is(steps.length, 2);
      assert.ok(steps.every((r) => Number.isFinite(r.policy_loss!) && r.response_length! > 0));
      assert.equal(
        steps.map((r) => r.version),
        [1, 2],
      );
      assert.ok(
        server.stats.generateRequests >= 8,
        `${server.stats.generateRequests} generate requests`,
      );
      assert.is(engine.getVersion(), 2, 'the server loaded each published version from disk');
      assert.ok(existsSync(join(weights, 'rollout_0', 'v2', 'model.safetensors')));
      assert.not.ok(
        readdirSync(join(weights, 'rollout_0')).includes('v0'),
        'old versions are removed',
      );
    } finally {
      await server.close();
      await engine.close();
    }
  });
}

test('train_ppo --engine sglang --engine-launch starts a server per rollout and stops it with the run', async () => {
  // The fake SGLang server as a process, started through the flag: each start appends its pid.
  const pids = join(root, 'launched.pids');
  const fake = fileURLToPath(new URL('../fakes/sglang-server.ts', import.meta.url));
  const command = `echo $$ >> '${pids}'; exec '${process.execPath}' --import tsx '${fake}' --port {port} --model-path {model}`;
  const weights = join(root, 'launch-weights');
  const rows: Record<string, number>[] = [];
  const s = await trainPpo(
    tinyRunArgs(model, join(root, 'launch-out'), {
      'in-process': true,
      engine: 'sglang',
      'engine-launch': command,
      'rollout-num-engines': 2,
      'engine-weights-path': weights,
      ...twoShortSteps,
    }),
    {},
    { log: { line: () => undefined, metric: (_s, v) => void rows.push(v) } },
  );
  assert.is(s.steps, 2);
  assert.equal(
    rows.filter((r) => r.reward_mean !== undefined).map((r) => r.version),
    [1, 2],
    'both servers loaded each published version',
  );
  for (const i of [0, 1]) assert.ok(existsSync(join(weights, `rollout_${i}`, 'v2')));
  const launched = readFileSync(pids, 'utf8').trim().split('\n').map(Number);
  assert.is(new Set(launched).size, 2, 'one server per rollout');
  assert.equal(
    launched.filter((pid) => pidAlive(pid)),
    [],
    'the servers are stopped with the run',
  );
});

test('a LoRA policy on --engine-launch servers: adapter slots at start, one adapter per version, no full weights', async () => {
  // The launcher appends the LoRA server flags; without them the fake refuses every adapter load
  // and the run fails at its first sync.
  const fake = fileURLToPath(new URL('../fakes/sglang-server.ts', import.meta.url));
  const command = `exec '${process.execPath}' --import tsx '${fake}' --port {port} --model-path {model}`;
  const weights = join(root, 'lora-weights');
  const rows: Record<string, number>[] = [];
  const s = await trainPpo(
    tinyRunArgs(model, join(root, 'lora-out'), {
      'in-process': true,
      engine: 'sglang',
      'engine-launch': command,
      'engine-weights-path': weights,
      'lora-rank': 4,
      'lora-alpha': 8,
      ...twoShortSteps,
    }),
    {},
    { log: { line: () => undefined, metric: (_s, v) => void rows.push(v) } },
  );
  assert.is(s.steps, 2);
  assert.equal(
    rows.filter((r) => r.reward_mean !== undefined).map((r) => r.version),
    [1, 2],
  );
  // Each version went to the servers as an adapter under lora/ (removed with the engine at the
  // end); the full-weight path would have left v1/ and v2/ checkpoints beside it.
  const dir = join(weights, 'rollout_0');
  assert.equal(readdirSync(dir), ['lora']);
  assert.equal(readdirSync(join(dir, 'lora')), [], 'the adapters go with the engine');
  assert.equal(
    readdirSync(dir).filter((n) => /^v\d+$/.test(n)),
    [],
    'no full-weight checkpoint was written for the servers',
  );
});

test('--engine-url is checked before anything starts', async () => {
  const err = (argv: string[]): Promise<string> =>
    trainPpo(argv, {}, {}).then(
      () => '',
      (e: Error) => e.message,
    );
  assert.match(
    await err(['--engine', 'sglang']),
    /--engine sglang needs --engine-url or --engine-launch/,
  );
  assert.match(
    await err(['--engine', 'sglang', '--engine-launch', 'serve --port 1']),
    /--engine-launch: the command must listen on \{port\}/,
  );
  assert.match(
    await err(['--engine-launch', 'serve --port {port}']),
    /--engine-launch needs --engine sglang or --engine vllm/,
  );
  assert.match(
    await err(['--engine', 'vllm', '--engine-url', 'http://a:1', '--engine-launch', 'x {port}']),
    /--engine-launch starts the servers: drop --engine-url/,
  );
  assert.match(
    await err(['--engine', 'vllm', '--engine-url', 'localhost:8000']),
    /'localhost:8000' is not an http\(s\) URL/,
  );
  assert.match(
    await err(['--engine', 'vllm', '--engine-url', 'http://a:1', '--rollout-num-engines', '2']),
    /--rollout-num-engines 2 exceeds the 1 server/,
  );
});

test.run();
