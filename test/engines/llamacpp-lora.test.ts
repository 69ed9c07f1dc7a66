/**
 * LoRA weight sync on the llama.cpp engine: the adapter goes to llama.cpp as a GGUF LoRA adapter
 * over the unchanged base, and the engine then computes what a fresh engine on the merged
 * checkpoint (`mergeLoraAdapter`: W + alpha/r · B·A) computes; a newer adapter replaces the older
 * one, full weights drop it, and each token carries the version that computed it.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

import type { LlamaCppEngine } from '../../engines/llamacpp/index.ts';
import type { GenerateRequest } from '../../engines/types.ts';
import { initBackend } from '../../model/backend.ts';
import type { LlamaConfig } from '../../model/config.ts';
import { mergeLoraAdapter } from '../../model/lora-adapter.ts';
import type { NamedTensors } from '../../model/tensors.ts';
import { randomModel, tinyLlamaConfig, tinyQwenConfig } from '../fixtures/model/tiny.ts';
import { llamaCppGenerating, llamaCppMissing } from './llamacpp-fixture.ts';
import { randomAdapter } from './lora-fixture.ts';

const test = suite('llamacpp LoRA sync');
const missing = await llamaCppMissing();
const prompt = [3, 5, 7, 9];
const greedy: GenerateRequest = { inputIds: prompt, gconfig: { maxNewTokens: 32, greedy: true } };

async function engineOn(config: LlamaConfig, weights: NamedTensors): Promise<LlamaCppEngine> {
  await initBackend('wasm');
  const { LlamaCppEngine } = await import('../../engines/llamacpp/index.ts');
  const model = randomModel(config, 11);
  try {
    model.importWeights(weights);
    return await LlamaCppEngine.create({ model, eosTokenIds: [], seed: 3, maxSequences: 4 });
  } finally {
    model.dispose();
  }
}

async function baseWeights(config: LlamaConfig): Promise<NamedTensors> {
  await initBackend('wasm');
  const model = randomModel(config, 11);
  try {
    return model.exportWeights();
  } finally {
    model.dispose();
  }
}

const maxDiff = (a: number[], b: number[]) => Math.max(0, ...a.map((x, i) => Math.abs(x - b[i]!)));

if (missing) {
  test('node-llama-cpp loads', () => assert.unreachable(missing));
} else {
  const families: [string, LlamaConfig][] = [
    ['llama (q/k rows permuted)', tinyLlamaConfig({ max_position_embeddings: 256 })],
    ['qwen2 (biases, tied head)', { ...tinyQwenConfig(), max_position_embeddings: 256 }],
  ];
  for (const [family, config] of families) {
    test(`${family}: base + adapter gives the merged checkpoint's tokens and logprobs`, async () => {
      const base = await baseWeights(config);
      const adapter = randomAdapter(base, 4, 8, 5);
      const served = await engineOn(config, base);
      const merged = await engineOn(config, mergeLoraAdapter(base, adapter));
      try {
        const before = await served.generate(greedy);
        await served.updateWeights({ kind: 'lora', adapter }, 1);
        const [got, want] = [await served.generate(greedy), await merged.generate(greedy)];
        assert.equal(got.outputTokens, want.outputTokens);
        const d = maxDiff(got.outputLogprobs, want.outputLogprobs);
        assert.ok(d < 1e-4, `max |Δ logprob| vs merged ${d}`);
        // The adapter changed what the model computes (else the check above proves nothing).
        assert.ok(maxDiff(before.outputLogprobs, want.outputLogprobs) > 1e-2);
        assert.equal(new Set(got.outputVersions), new Set([1]));
      } finally {
        await served.close();
        await merged.close();
      }
    });
  }

  test('a newer adapter replaces the older one; full weights drop it', async () => {
    const config = families[0]![1];
    const base = await baseWeights(config);
    const a1 = randomAdapter(base, 2, 4, 6);
    const a2 = randomAdapter(base, 8, 8, 7);
    const served = await engineOn(config, base);
    const ref2 = await engineOn(config, mergeLoraAdapter(base, a2));
    const ref0 = await engineOn(config, base);
    try {
      await served.updateWeights({ kind: 'lora', adapter: a1 }, 1);
      await served.updateWeights({ kind: 'lora', adapter: a2 }, 2);
      const [got2, want2] = [await served.generate(greedy), await ref2.generate(greedy)];
      assert.equal(got2.outputTokens, want2.outputTokens);
      assert.ok(maxDiff(got2.outputLogprobs, want2.outputLogprobs) < 1e-4, 'adapter 2 alone');
      await served.updateWeights({ kind: 'tensors', tensors: base }, 3);
      const [got0, want0] = [await served.generate(greedy), await ref0.generate(greedy)];
      assert.equal(got0.outputTokens, want0.outputTokens);
      assert.ok(maxDiff(got0.outputLogprobs, want0.outputLogprobs) < 1e-4, 'no adapter left');
      assert.equal(new Set(got0.outputVersions), new Set([3]));
    } finally {
      await served.close();
      await ref2.close();
      await ref0.close();
    }
  });

  test('an update mid-request: tokens after it come from base + adapter, labelled with its version', async () => {
    const config = families[0]![1];
    const base = await baseWeights(config);
    const adapter = randomAdapter(base, 4, 8, 9);
    const served = await engineOn(config, base);
    const merged = await engineOn(config, mergeLoraAdapter(base, adapter));
    try {
      const long: GenerateRequest = {
        inputIds: prompt,
        gconfig: { maxNewTokens: 240, greedy: true },
      };
      const running = served.generate(long);
      await llamaCppGenerating(() => served);
      await served.updateWeights({ kind: 'lora', adapter }, 7);
      const r = await running;
      const cut = r.outputVersions.indexOf(7);
      assert.ok(
        cut > 0 && cut < r.outputTokens.length,
        `switch at ${cut} of ${r.outputTokens.length}`,
      );
      assert.equal(new Set(r.outputVersions.slice(0, cut)), new Set([0]));
      assert.equal(new Set(r.outputVersions.slice(cut)), new Set([7]));
      // The merged model continuing from prompt + the tokens made before the switch.
      const rest = await merged.generate({
        inputIds: prompt.concat(r.outputTokens.slice(0, cut)),
        gconfig: { maxNewTokens: r.outputTokens.length - cut, greedy: true },
      });
      assert.equal(r.outputTokens.slice(cut), rest.outputTokens);
      assert.ok(maxDiff(r.outputLogprobs.slice(cut), rest.outputLogprobs) < 1e-4);
    } finally {
      await served.close();
      await merged.close();
    }
  });
}

test.run();
