/**
 * train_ppo --engine sglang --vllm-sync-backend gloo: the rollout's engine is rank 0 of a Gloo
 * group, a Python SGLang fake with torch.distributed (test/fakes/weight_sync_server.py) joins it
 * and receives every published version by broadcast, while generation goes to the TS fake
 * behind it. After the last step the Python fake holds the saved policy byte for byte.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import { readSafetensorsFile } from '../../model/safetensors.ts';
import { loadTokenizer } from '../../model/tokenizer.ts';
import { trainPpo } from '../../train/ppo/main.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { EngineGenerator } from '../fakes/token-generator.ts';
import { startWeightSyncFake } from '../fakes/weight-sync-server.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-wsync-run-'));
test.after(() => rmSync(root, { recursive: true, force: true }));

test('train_ppo --engine sglang --vllm-sync-backend gloo leaves the Python server holding the saved policy, byte for byte', async () => {
  const model = await writeTinyModel(root);
  const engine = await BuiltinEngine.create({ modelPath: model, seed: 1 });
  const tok = loadTokenizer(model);
  const generator = new EngineGenerator(engine, {
    eosTokenId: tok.eosTokenId!,
    decode: (ids) => tok.decode(ids),
  });
  const upstream = await FakeSglangServer.start({ generator, modelPath: model });
  const server = await startWeightSyncFake({ kind: 'sglang', model, upstream: upstream.url });
  const out = join(root, 'out');
  const weights = join(root, 'weights');
  const rows: Record<string, number>[] = [];
  const lines: string[] = [];
  try {
    const s = await trainPpo(
      tinyRunArgs(model, out, {
        'in-process': true,
        engine: 'sglang',
        'engine-url': server.url,
        vllm_sync_backend: 'gloo',
        'engine-weights-path': weights,
        'agent-func': fileURLToPath(
          new URL('../fixtures/agents/alternating-step.ts', import.meta.url),
        ),
        'rollout-batch-size': 2,
        'train-batch-size': 4,
        'micro-train-batch-size': 4,
        'generate-max-len': 6,
        'max-steps': 2,
      }),
      {},
      { log: { line: (l) => void lines.push(l), metric: (_s, v) => void rows.push(v) } },
    );
    assert.is(s.steps, 2);
    assert.ok(
      lines.some((l) => l.includes('1 sglang (weights by gloo) engine(s)')),
      'the run line names the weight sync',
    );
    assert.equal(
      rows.filter((r) => r.reward_mean !== undefined).map((r) => r.version),
      [1, 2],
    );
    const held = await server.state();
    assert.is(held.version, '2');
    assert.is(held.updates, 2, 'both versions arrived by broadcast');
    assert.equal(held.errors, []);
    assert.not.ok(existsSync(join(weights, 'rollout_0', 'v2')), 'no checkpoint was written');
    const saved = readSafetensorsFile(join(out, 'model.safetensors')).tensors;
    const digests = Object.fromEntries(
      Object.entries(saved).map(([n, t]) => [
        n,
        createHash('sha256')
          .update(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength))
          .digest('hex'),
      ]),
    );
    assert.equal(held.digests, digests);
    const initial = readSafetensorsFile(join(model, 'model.safetensors')).tensors;
    const name = 'model.layers.0.mlp.down_proj.weight';
    assert.not.equal(
      Array.from(saved[name]!.data),
      Array.from(initial[name]!.data),
      'training changed the policy',
    );
  } finally {
    await server.close();
    await upstream.close();
    await engine.close();
  }
});

test.run();
