/**
 * The flags a LoRA policy's servers are started with (`loraServerArgs`), and `--engine-launch`
 * lines that get them: a launched fake vLLM/SGLang server then serves the run-time LoRA routes
 * the engine's LoRA update uses, and one launched without them does not.
 */
import { fileURLToPath } from 'node:url';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

import type { RemoteEngine } from '../../engines/http/remote-engine.ts';
import { launchServerCommand, loraServerArgs } from '../../engines/launcher.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import { VllmEngine } from '../../engines/vllm/index.ts';
import { peftTensorName, type LoraAdapter } from '../../model/lora-adapter.ts';
import { tempDir } from './fake-fixtures.ts';

const test = suite('LoRA server flags');
const fakes = {
  sglang: fileURLToPath(new URL('../fakes/sglang-server.ts', import.meta.url)),
  vllm: fileURLToPath(new URL('../fakes/vllm-server.ts', import.meta.url)),
};

test('vLLM: --enable-lora, slots as --max-loras/--max-cpu-loras, the rank rounded up, the env switch', () => {
  assert.equal(loraServerArgs({ engine: 'vllm', slots: 3, rank: 12, targetModules: ['q_proj'] }), {
    args: ['--enable-lora', '--max-loras', '3', '--max-cpu-loras', '3', '--max-lora-rank', '16'],
    env: { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' },
  });
  assert.throws(
    () => loraServerArgs({ engine: 'vllm', slots: 3, rank: 600, targetModules: [] }),
    /up to 512/,
  );
  assert.throws(
    () => loraServerArgs({ engine: 'sglang', slots: 1, rank: 8, targetModules: [] }),
    /≥ 2/,
  );
});

test('SGLang: slots per batch and loaded, rank and target modules for the memory pool', () => {
  assert.equal(
    loraServerArgs({ engine: 'sglang', slots: 4, rank: 8, targetModules: ['q_proj', 'v_proj'] })
      .args,
    [
      '--enable-lora',
      '--max-loras-per-batch',
      '4',
      '--max-loaded-loras',
      '4',
      '--max-lora-rank',
      '8',
      '--lora-target-modules',
      'q_proj',
      'v_proj',
    ],
  );
});

const adapter: LoraAdapter = {
  config: { r: 2, alpha: 4, targetModules: ['q_proj'], dropout: 0, baseModel: '/fake/model' },
  tensors: {
    [peftTensorName('model.layers.0.self_attn.q_proj', 'A')]: {
      shape: [2, 4],
      data: new Float32Array(8).fill(0.5),
    },
    [peftTensorName('model.layers.0.self_attn.q_proj', 'B')]: {
      shape: [4, 2],
      data: new Float32Array(8).fill(-0.25),
    },
  },
};

for (const engine of ['sglang', 'vllm'] as const) {
  test(`${engine}: a launch line with the LoRA flags serves LoRA updates; without them it refuses`, async () => {
    const line = `exec '${process.execPath}' --import tsx '${fakes[engine]}' --port {port} --model-path {model} {lora}`;
    const dir = tempDir();
    const lora = { engine, slots: 3, rank: 2, targetModules: ['q_proj'] };
    try {
      for (const withLora of [true, false]) {
        const server = await launchServerCommand(line, {
          model: '/fake/model',
          pollIntervalMs: 100,
          readyTimeoutMs: 60_000,
          ...(withLora ? { lora } : {}),
        });
        const opts = { urls: [server.url], loraDir: dir.path, loraSlots: 3 };
        const e: RemoteEngine = engine === 'sglang' ? new SglangEngine(opts) : new VllmEngine(opts);
        try {
          const got = await e.updateWeights({ kind: 'lora', adapter }, 1).then(
            () => 'loaded',
            (err: Error) => err.message,
          );
          if (withLora) assert.is(got, 'loaded');
          else assert.match(got, /failed on every server/);
        } finally {
          await e.close();
          await server.stop();
        }
      }
    } finally {
      dir.cleanup();
    }
  });
}

test.run();
