/**
 * In-place weight updates of the llama.cpp engine are verified, not assumed: a model llama.cpp
 * computes from a copy of its own (here: loaded without mmap, as ggml's AMX and repacked
 * buffers do on some CPUs) is found by the probe at load, and an update that does not reach
 * the weights llama.cpp computes with fails instead of labelling old weights' tokens as new.
 */
import { copyFileSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import type { LlamaCppEngine, LlamaCppError } from '../../engines/llamacpp/index.ts';
import type { GenerateRequest, GenerateResult } from '../../engines/types.ts';
import { randomModel, tinyLlamaConfig } from '../fixtures/model/tiny.ts';
import { llamaCppMissing, tinyLlamaCppEngine } from './llamacpp-fixture.ts';

const test = suite('llamacpp in-place weight sync');
const missing = await llamaCppMissing();
// 32-aligned sizes, so that q8_0 applies to every matrix.
const aligned = { hidden_size: 64, intermediate_size: 128 };
const req: GenerateRequest = {
  inputIds: [3, 5, 7, 9],
  gconfig: { maxNewTokens: 12, greedy: true },
};
const nextWeights = () => {
  const m = randomModel(tinyLlamaConfig({ max_position_embeddings: 256, ...aligned }), 12);
  const tensors = m.exportWeights();
  m.dispose();
  return tensors;
};

/**
 * An in-place engine whose GGUF, after `prepare`, is replaced by a copy at the same path: rewrites
 * then go to the new file while llama.cpp still maps the old one.
 */
async function withReplacedGguf(
  prepare: (l: LlamaCppEngine) => Promise<void>,
  check: (l: LlamaCppEngine, before: GenerateResult) => Promise<void>,
): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-stale-'));
  const l = await tinyLlamaCppEngine({ ggufPath: join(dir, 'model.gguf') }, 11, aligned);
  try {
    const before = await l.generate(req);
    await prepare(l);
    copyFileSync(l.layout.path, join(dir, 'copy.gguf'));
    renameSync(join(dir, 'copy.gguf'), l.layout.path);
    await check(l, before);
    assert.is(l.getVersion(), 0);
    const after = await l.generate(req);
    assert.equal(after.outputLogprobs, before.outputLogprobs);
    assert.ok(after.outputVersions.every((v) => v === 0));
  } finally {
    await l.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (missing) {
  test('node-llama-cpp loads', () => assert.unreachable(missing));
} else {
  for (const dtype of ['f32', 'q8_0'] as const) {
    test(`${dtype}: a model llama.cpp copied at load is found by the probe; explicit 'inplace' is refused in one line`, async () => {
      const err = await tinyLlamaCppEngine(
        { dtype, mmap: false, weightSync: 'inplace' },
        11,
        aligned,
      ).catch((e: unknown) => e as LlamaCppError);
      assert.instance(err, Error);
      assert.is((err as LlamaCppError).code, 'LLAMACPP_INVALID');
      assert.match(
        (err as Error).message,
        `weightSync 'inplace': llama.cpp computes the ${dtype} matrices from a copy of its own`,
      );
      assert.not.match((err as Error).message, '\n');
    });

    test(`${dtype}: the same model with the default sync reloads (one warning) and serves the update`, async () => {
      const warnings: string[] = [];
      const l = await tinyLlamaCppEngine(
        { dtype, mmap: false, onWarning: (w) => warnings.push(w) },
        11,
        aligned,
      );
      const fresh = await tinyLlamaCppEngine({ dtype }, 12, aligned);
      try {
        assert.is(l.weightSync, 'reload');
        assert.is(warnings.length, 1);
        assert.match(warnings[0]!, /^llamacpp: weights reload after each update \(/);
        const before = await l.generate(req);
        await l.updateWeights({ kind: 'tensors', tensors: nextWeights() }, 1);
        const after = await l.generate(req);
        assert.not.equal(after.outputLogprobs, before.outputLogprobs);
        assert.equal(after.outputLogprobs, (await fresh.generate(req)).outputLogprobs);
        assert.ok(after.outputVersions.every((v) => v === 1));
      } finally {
        await l.close();
        await fresh.close();
      }
    });
  }

  test('an update that does not reach the mapping fails with LLAMACPP_STALE and the old version stays', () =>
    withReplacedGguf(
      async (l) => assert.is(l.weightSync, 'inplace'),
      async (l) => {
        const err = await l
          .updateWeights({ kind: 'tensors', tensors: nextWeights() }, 1)
          .catch((e: unknown) => e as LlamaCppError);
        assert.instance(err, Error);
        assert.is((err as LlamaCppError).code, 'LLAMACPP_STALE');
        assert.match((err as Error).message, 'weights of version 1 did not reach llama.cpp');
      },
    ));

  test('an update written while asleep is checked at wake-up: a stale one fails and the old version stays', () =>
    withReplacedGguf(
      (l) => l.sleep(),
      async (l) => {
        await l.updateWeights({ kind: 'tensors', tensors: nextWeights() }, 1);
        const err = await l.wakeUp().catch((e: unknown) => e as LlamaCppError);
        assert.is((err as LlamaCppError).code, 'LLAMACPP_STALE');
      },
    ));

  test('an update in place is checked by the probe, and one that changes no byte is not stale', async () => {
    const l = await tinyLlamaCppEngine({ dtype: 'q8_0' }, 11, aligned);
    try {
      const tensors = nextWeights();
      await l.updateWeights({ kind: 'tensors', tensors }, 1);
      assert.ok(l.stats.lastProbeMs > 0);
      // The same weights again: no byte changes, the probe's output does not either.
      await l.updateWeights({ kind: 'tensors', tensors }, 2);
      assert.is(l.getVersion(), 2);
    } finally {
      await l.close();
    }
  });
}

test.run();
