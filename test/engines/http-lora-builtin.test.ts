/**
 * LoRA sync through the HTTP engines to fake servers generating with the builtin TF.js engine:
 * the fake loads the PEFT directory the engine wrote and serves the adapter's requests on the
 * base merged with it (`mergeLoraAdapter`), so after the update the proxy returns exactly what
 * the builtin engine on the merged checkpoint generates, and before it what the base generates.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

import { BuiltinEngine } from '../../engines/builtin/index.ts';
import type { RemoteEngine } from '../../engines/http/remote-engine.ts';
import { SglangEngine } from '../../engines/sglang/index.ts';
import type { InferenceEngine } from '../../engines/types.ts';
import { VllmEngine } from '../../engines/vllm/index.ts';
import { initBackend } from '../../model/backend.ts';
import { mergeLoraAdapter, type LoraAdapter } from '../../model/lora-adapter.ts';
import type { NamedTensors } from '../../model/tensors.ts';
import { FakeSglangServer } from '../fakes/sglang-server.ts';
import { EngineGenerator } from '../fakes/token-generator.ts';
import { FakeVllmServer } from '../fakes/vllm-server.ts';
import { randomModel, tinyLlamaConfig } from '../fixtures/model/tiny.ts';
import { builtinPrompt } from './builtin-fixture.ts';
import { closedAfterEach, tempDir } from './fake-fixtures.ts';
import { randomAdapter } from './lora-fixture.ts';

const test = suite('HTTP engines → fake servers → builtin engine: LoRA');
const own = closedAfterEach(test);
const config = tinyLlamaConfig({ max_position_embeddings: 256 });

/** A builtin engine on `weights` of the tiny model. */
async function builtinOn(weights: NamedTensors): Promise<InferenceEngine> {
  await initBackend('wasm');
  const model = randomModel(config, 11);
  model.importWeights(weights);
  return BuiltinEngine.create({ model, eosTokenIds: [], seed: 3 });
}

for (const kind of ['sglang', 'vllm'] as const) {
  test(`${kind}: after the update the proxy gives the merged checkpoint's tokens and logprobs`, async () => {
    await initBackend('wasm');
    const m = randomModel(config, 11);
    const base = m.exportWeights();
    m.dispose();
    const adapter: LoraAdapter = randomAdapter(base, 4, 8, 21);
    const generator = new EngineGenerator(own(await builtinOn(base)), {
      eosTokenId: -1,
      decode: (ids) => ids.join(' '),
      adapterEngine: (lora) => builtinOn(mergeLoraAdapter(base, lora)),
    });
    const lora = { maxLoaded: 4, maxRank: 16 };
    const fake = own(
      kind === 'sglang'
        ? await FakeSglangServer.start({ generator, lora })
        : await FakeVllmServer.start({ generator, lora, logprobsMode: 'processed_logprobs' }),
    );
    const dir = tempDir();
    const opts = { urls: [fake.url], loraDir: dir.path, healthIntervalMs: 60_000 };
    const proxy: RemoteEngine = own(
      kind === 'sglang'
        ? new SglangEngine(opts)
        : new VllmEngine({ ...opts, logprobsMode: 'processed_logprobs' }),
    );
    const merged = own(await builtinOn(mergeLoraAdapter(base, adapter)));
    const req = { inputIds: builtinPrompt, gconfig: { greedy: true, maxNewTokens: 12 } };
    try {
      const before = await proxy.generate(req);
      await proxy.updateWeights({ kind: 'lora', adapter }, 1);
      const [got, want] = [await proxy.generate(req), await merged.generate(req)];
      assert.equal(got.outputTokens, want.outputTokens);
      assert.equal(got.outputLogprobs, want.outputLogprobs);
      assert.equal(got.outputVersions, Array(12).fill(1));
      assert.not.equal(before.outputLogprobs, want.outputLogprobs);
    } finally {
      dir.cleanup();
    }
  });
}

test.run();
