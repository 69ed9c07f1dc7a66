/**
 * HF → GGUF round trips: llama.cpp (node-llama-cpp, CPU, one thread) computes, from the GGUF that
 * model/gguf writes, the logprobs the TF.js model computes, on every family; the tokenizer and
 * chat template are carried; the in-place rewrite is what a fresh load of the new weights gives.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';

import { initBackend, tf } from '../../model/backend.ts';
import { loadModel as loadHfModel } from '../../model/checkpoint.ts';
import { resolveConfig, type LlamaConfig } from '../../model/config.ts';
import {
  GgufError,
  rewriteGgufTensors,
  toF16,
  toQ8_0,
  writeGguf,
  type GgufDtype,
  type GgufLayout,
} from '../../model/gguf/index.ts';
import { CausalLM } from '../../model/llama.ts';
import { llamaCppMissing } from '../engines/llamacpp-fixture.ts';
import { writeTinyQwen3 } from '../fixtures/model/qwen3.ts';
import { randomModel, tinyFamilyConfigs, tinyLlamaConfig } from '../fixtures/model/tiny.ts';

const test = suite('gguf round trip');
const missing = await llamaCppMissing();
const dir = mkdtempSync(join(tmpdir(), 'rtjob-gguf-test-'));
test.after(() => rmSync(dir, { recursive: true, force: true }));

const prompt = [3, 5, 7, 9, 11, 2, 30, 1, 8, 8, 8, 17, 0, 39, 21, 4];

/** log softmax of the TF.js model's logits at every position of `ids`. */
function tfLogprobs(m: CausalLM, ids: number[]): Float32Array[] {
  return tf.tidy(() => {
    const out = m.forward(tf.tensor2d([ids], [1, ids.length], 'int32'), { grad: false });
    const lp = tf.logSoftmax(out.logits!).dataSync() as Float32Array;
    const V = m.config.vocab_size;
    return ids.map((_, i) => lp.slice(i * V, (i + 1) * V));
  });
}

/** llama.cpp's temperature-1 logprobs at every position of `ids`, from the GGUF at `path`. */
async function ggufLogprobs(path: string, ids: number[], V: number): Promise<Float32Array[]>;
async function ggufLogprobs(
  path: string,
  ids: number[],
  V: number,
  between: () => void,
): Promise<[Float32Array[], Float32Array[]]>;
/** With `between`: the logprobs before and after it runs, on the same loaded model. */
async function ggufLogprobs(
  path: string,
  ids: number[],
  V: number,
  between?: () => void,
): Promise<Float32Array[] | [Float32Array[], Float32Array[]]> {
  const m = await import('node-llama-cpp');
  const llama = await m.getLlama({ build: 'never', gpu: false, logLevel: m.LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
  try {
    const ctx = await model.createContext({
      contextSize: 256,
      sequences: 1,
      threads: 1,
      flashAttention: false,
      experimentalKvCacheKeyType: 'F32',
      experimentalKvCacheValueType: 'F32',
    });
    const opts = { temperature: 1, topK: 0, topP: 1, minP: 0 };
    const seq = ctx.getSequence();
    const run = async () => {
      await seq.clearHistory();
      const out = await seq.controlledEvaluate(
        ids.map((t) => [t as never, { generateNext: { probabilities: true, options: opts } }]),
      );
      return out.map((o) => {
        const lp = new Float32Array(V).fill(-Infinity);
        for (const [t, p] of o!.next.probabilities!) lp[t] = Math.log(p);
        return lp;
      });
    };
    const first = await run();
    const second = between ? (between(), await run()) : undefined;
    await ctx.dispose();
    return second ? [first, second] : first;
  } finally {
    await model.dispose();
  }
}

/**
 * Max |a - b| over positions and tokens whose reference logprob `b` is above -40: llama.cpp
 * returns probabilities as float32, so below ~1e-38 (logprob -87) they lose precision.
 */
function maxDiff(a: Float32Array[], b: Float32Array[]): number {
  let d = 0;
  a.forEach((x, i) =>
    x.forEach((v, j) => {
      if (b[i]![j]! > -40) d = Math.max(d, Math.abs(v - b[i]![j]!));
    }),
  );
  return d;
}

async function parity(
  config: LlamaConfig,
  dtype: GgufDtype,
  seed = 5,
  init = false,
): Promise<number> {
  const m = init ? CausalLM.init(config, { seed }) : randomModel(config, seed);
  try {
    const path = join(dir, `${config.model_type}-${dtype}.gguf`);
    writeGguf(path, config, m.exportWeights(), { dtype });
    return maxDiff(await ggufLogprobs(path, prompt, config.vocab_size), tfLogprobs(m, prompt));
  } finally {
    m.dispose();
  }
}

test('f16 encoding rounds to nearest even, keeps signs, infinities, NaN and subnormals', () => {
  const xs = new Float32Array([
    0,
    -0,
    1,
    -2.5,
    65504,
    65520,
    1e-8,
    5.960464477539063e-8,
    Infinity,
    NaN,
    1.0009765625,
    1.00048828125,
    1.00146484375,
  ]);
  assert.equal(
    Array.from(toF16(xs)),
    [
      0x0000, 0x8000, 0x3c00, 0xc100, 0x7bff, 0x7c00, 0x0000, 0x0001, 0x7c00, 0x7e00, 0x3c01,
      0x3c00, 0x3c02,
    ],
  );
});

test('q8_0 blocks: an f16 scale max|x|/127 and 32 rounded int8, within half a step of x', () => {
  const x = new Float32Array(64).map((_, i) => Math.sin(i * 1.7) * (i < 32 ? 0.01 : 3));
  const q = toQ8_0(x);
  assert.is(q.length, 2 * 34);
  const view = new DataView(q.buffer);
  for (let b = 0; b < 2; b++) {
    const h = view.getUint16(b * 34, true);
    const d = (1 + (h & 0x3ff) / 1024) * 2 ** (((h >> 10) & 0x1f) - 15);
    for (let j = 0; j < 32; j++) {
      const v = x[b * 32 + j]!;
      assert.ok(Math.abs(view.getInt8(b * 34 + 2 + j) * d - v) <= d * 0.51 + Math.abs(v) * 1e-3);
    }
  }
});

test('q8_0 rounds as roundf (ties away from zero) and writes a zero block as zeros', () => {
  // max |x| = 127 gives d = 1 (f16 0x3c00), so the quants are x rounded.
  const x = new Float32Array(64);
  x.set([127, -127, 2.5, -2.5, 0.5, -0.5, 1.49, -1.51, 0.25, 126.5]);
  const q = toQ8_0(x);
  assert.equal([...q.subarray(0, 2)], [0x00, 0x3c]);
  assert.equal([...new Int8Array(q.buffer, 2, 10)], [127, -127, 3, -3, 1, -1, 1, -2, 0, 127]);
  assert.equal([...q.subarray(34)], new Array(34).fill(0));
});

if (missing) {
  // node-llama-cpp is an optional dependency that `npm install` brings: missing is a failure.
  test('node-llama-cpp loads', () => assert.unreachable(missing));
} else {
  test.before(async () => {
    await initBackend('cpu');
  });

  // f32 GGUF vs TF.js (cpu backend), 16 positions × 40 logprobs each: measured ≤ 3e-6.
  for (const [name, raw] of Object.entries(tinyFamilyConfigs())) {
    const config = resolveConfig({ ...raw, max_position_embeddings: 256 });
    if (config.model_type === 'qwen3' && config.qkv_bias) {
      test(`${name}: refused (llama.cpp's qwen3 has no attention biases)`, () => {
        assert.throws(
          () => writeGguf(join(dir, 'x.gguf'), config, {}),
          (e: unknown) => e instanceof GgufError && e.code === 'GGUF_UNSUPPORTED',
        );
      });
      continue;
    }
    test(`${name}: f32 GGUF logprobs equal the TF.js model's within 2e-5`, async () => {
      const d = await parity(config, 'f32');
      assert.ok(d < 2e-5, `max |Δ logprob| ${d}`);
    });
  }

  test('without the q/k row permutation a Llama GGUF computes something else', async () => {
    // The tiny Llama's q/k rows permuted back make llama.cpp rotate the wrong pairs.
    const config = tinyLlamaConfig({ max_position_embeddings: 256 });
    const m = randomModel(config, 5);
    try {
      const path = join(dir, 'unpermuted.gguf');
      const layout = writeGguf(path, config, m.exportWeights());
      const undo: GgufLayout = {
        ...layout,
        tensors: new Map(
          [...layout.tensors].map(([k, p]) => [k, { ...p, permuteHeads: undefined }]),
        ),
      };
      rewriteGgufTensors(undo, m.exportWeights());
      const d = maxDiff(await ggufLogprobs(path, prompt, 40), tfLogprobs(m, prompt));
      assert.ok(d > 0.1, `max |Δ logprob| ${d}`);
    } finally {
      m.dispose();
    }
  });

  // Lower precisions, on the tiny Qwen2 widened to hidden 64 (so q8_0's 32-blocks apply to every
  // matrix) with HF-like init (normal 0.02): measured f16 2.9e-4, bf16 1.8e-3, q8_0 5.5e-3.
  const lower: [GgufDtype, number][] = [
    ['f16', 2e-3],
    ['bf16', 1e-2],
    ['q8_0', 2e-2],
  ];
  for (const [dtype, tol] of lower) {
    test(`${dtype} GGUF logprobs stay within ${tol} of f32`, async () => {
      const config = resolveConfig({
        ...tinyFamilyConfigs()['qwen2 (q/k/v bias, no o bias, tied)']!,
        hidden_size: 64,
        intermediate_size: 96,
        max_position_embeddings: 256,
      });
      const d = await parity(config, dtype, 5, true);
      console.log(`  ${dtype}: max |Δ logprob| ${d.toExponential(2)}`);
      assert.ok(d < tol, `max |Δ logprob| ${d}`);
    });
  }

  test('in place: a loaded GGUF whose bytes are rewritten computes as a fresh load of the new weights', async () => {
    const config = tinyLlamaConfig({ max_position_embeddings: 256 });
    const [a, b] = [randomModel(config, 1), randomModel(config, 2)];
    try {
      const layout = writeGguf(join(dir, 'inplace.gguf'), config, a.exportWeights());
      writeGguf(join(dir, 'fresh.gguf'), config, b.exportWeights());
      const fresh = await ggufLogprobs(join(dir, 'fresh.gguf'), prompt, 40);
      const [before, after] = await ggufLogprobs(layout.path, prompt, 40, () =>
        rewriteGgufTensors(layout, b.exportWeights()),
      );
      assert.is(maxDiff(after!, fresh), 0);
      assert.ok(maxDiff(before!, fresh) > 0.1);
    } finally {
      a.dispose();
      b.dispose();
    }
  });

  test('the tokenizer and chat template are carried: llama.cpp tokenizes Qwen3 text as rtjob does', async () => {
    const ckpt = await writeTinyQwen3(join(dir, 'qwen3'));
    const { model: tfm, tokenizer } = await loadHfModel(ckpt);
    tfm.dispose();
    const path = join(dir, 'qwen3.gguf');
    writeGguf(
      path,
      (await import('../../model/checkpoint.ts')).readConfig(ckpt),
      (await import('../../model/checkpoint.ts')).readWeights(ckpt),
      { tokenizerDir: ckpt, dtype: 'bf16' },
    );
    const m = await import('node-llama-cpp');
    const llama = await m.getLlama({ build: 'never', gpu: false, logLevel: m.LlamaLogLevel.error });
    const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
    try {
      const text = 'Hello, world! 12345 naïve café — 你好 <think>x</think>\n\ttabs';
      assert.equal(Array.from(model.tokenize(text, true)), tokenizer!.encode(text));
      const ids = tokenizer!.encode(text);
      assert.is(model.detokenize(ids as never, true), text);
      assert.ok(
        String(model.fileInfo.metadata.tokenizer?.chat_template ?? '').includes('<|im_start|>'),
      );
    } finally {
      await model.dispose();
    }
  });
}

test.run();
