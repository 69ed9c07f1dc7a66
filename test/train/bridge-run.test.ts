import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadTokenizer } from '../../model/tokenizer.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { EngineGenerator } from '../fakes/token-generator.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import { tinyRunArgs } from '../fixtures/agents/tiny-model.ts';
import { writeTinyQwen3 } from '../fixtures/model/qwen3.ts';
import { scriptedEngine } from '../gateway/helpers.ts';

// Bridge mode measured where it matters, in train_ppo's per-step `trajectory_breaks`: a Qwen3
// policy (the real tokenizer and chat template, tiny random weights) asked two questions per
// episode with thinking off. The template's generation prompt ends in an empty `<think>` that the
// re-rendered history leaves out, so without bridging every second question starts a new
// trajectory; bridged, none does. The answers come from a vLLM fake (scripted, ending with
// `<|im_end|>` as a trained model does); the trainer trains the tiny Qwen3 on them.
process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-bridge-run-'));
const agentFile = fileURLToPath(
  new URL('../fixtures/agents/qwen3-no-thinking-agent.ts', import.meta.url),
);
let model = '';
let server: FakeVllmServer;

test.before(async () => {
  model = await writeTinyQwen3(join(root, 'qwen3'));
  const tok = loadTokenizer(model);
  const answers = scriptedEngine(tok, (prompt) =>
    prompt.includes('Are you sure?') ? 'Yes, 5.' : 'It is 5.',
  );
  const generator = new EngineGenerator(answers, {
    eosTokenId: tok.eosTokenId!,
    decode: (ids) => tok.decode(ids),
  });
  server = await FakeVllmServer.start({ generator, modelPath: model });
});
test.after(async () => {
  await server.close();
  rmSync(root, { recursive: true, force: true });
});

async function breaksPerStep(bridge: boolean): Promise<number[]> {
  const rows = new Map<number, Record<string, number>>();
  const summary = await trainPpo(
    [
      ...tinyRunArgs(model, join(root, `out-${bridge}`), {
        'in-process': true,
        'agent-func': agentFile,
        engine: 'vllm',
        'engine-url': server.url,
        'engine-weights-path': join(root, `w-${bridge}`),
        'rollout-batch-size': 2,
        'n-samples-per-prompt': 2,
        'train-batch-size': 4,
        'micro-train-batch-size': 2,
        'generate-max-len': 16,
        'max-steps': 2,
        'no-gateway-bridge': !bridge,
      }),
    ],
    {},
    {
      log: {
        line: () => undefined,
        metric: (s, v) => void rows.set(s, { ...rows.get(s), ...v }),
      },
    },
  );
  assert.is(summary.steps, 2);
  assert.is(summary.episodesFailed, 0);
  const steps = [...rows.values()].filter((r) => r.reward_mean !== undefined);
  // Bridged, each episode is one trajectory; broken, two.
  assert.equal(
    steps.map((r) => r['gateway/trajectories']),
    bridge ? [1, 1] : [2, 2],
  );
  return steps.map((r) => r.trajectory_breaks!);
}

test('Qwen3 with thinking off: bridged, 0 breaks per step; without bridging, one per episode', async () => {
  assert.equal(await breaksPerStep(true), [0, 0]);
  assert.equal(await breaksPerStep(false), [4, 4]);
});

test.run();
