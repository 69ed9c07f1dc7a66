/**
 * The chunked training LM head (`CausalLM.chunkedHead`, `tokenStats(…, { headChunkTokens })`):
 * next-token logprobs, entropy and every gradient (hidden states, the head or tied embedding,
 * every other weight, LoRA adapters) equal the unchunked pass's, on the cpu oracle and on torch
 * (libtorch on CPU here; its fused next-token logprob runs when no entropy is asked), for a Llama
 * with an untied head and a Qwen3 with tied embeddings, with chunks of 5 tokens that do not
 * divide the 24 tokens of the batch. Tolerance: logprobs and entropy within 1e-5 absolute;
 * gradients max |Δ| ≤ 1e-5 × the tensor's largest |gradient| (the chunks run the same kernels
 * on the same rows; the head weight's gradient is summed chunk by chunk, a different float
 * summation order). And no tensor outlives a step.
 *
 * Needs libtorch (CI installs Debian's libtorch-dev); without it the torch cases fail, naming
 * what is missing.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf, type BackendName } from '../../model/backend.ts';
import { resolveConfig, type LlamaConfig } from '../../model/config.ts';
import type { CausalLM } from '../../model/llama.ts';
import { parseTargetModules } from '../../model/lora-adapter.ts';
import { padBatch, tokenStats } from '../../model/training.ts';
import { randomModel, tinyFamilyConfigs } from '../fixtures/model/tiny.ts';

const configs: Record<string, LlamaConfig> = {
  llama: resolveConfig(
    tinyFamilyConfigs()['llama v4 (q/k/v/o bias, head_dim 8, llama3 rope_scaling, untied)']!,
  ),
  qwen3: resolveConfig(
    tinyFamilyConfigs()['qwen3 v4 (q/k norm, head_dim 8 decoupled from hidden 16, tied)']!,
  ),
};

// 3 rows × 8 next-token positions = 24 tokens; chunks of 5 leave a last chunk of 4.
const seqs = [
  [1, 2, 3, 4, 5, 6, 7, 8, 9],
  [11, 12, 13, 14, 15, 16, 17, 18, 19],
  [20, 3, 21, 22, 5, 6, 9, 10, 2],
];
const chunk = 5;

interface Run {
  logprobs: Float32Array;
  entropy?: Float32Array;
  grads: Map<string, Float32Array>;
}

/**
 * tokenStats with `headChunkTokens` and the gradients of a loss that weighs every logprob (and
 * entropy) differently, for every variable the optimizer would train.
 */
function run(m: CausalLM, headChunkTokens: number | undefined, entropy: boolean): Run {
  const ids = padBatch(seqs).ids;
  const [B, T] = ids.shape;
  const w = tf.tensor2d(
    Array.from({ length: B * (T - 1) }, (_, i) => Math.sin(i + 1)),
    [B, T - 1],
  );
  const vars = [...m.trainableParams()];
  let lp: Float32Array | undefined;
  let ent: Float32Array | undefined;
  const { value, grads } = tf.variableGrads(
    () => {
      const st = tokenStats(m, ids, {
        temperature: 0.7,
        entropy,
        ...(headChunkTokens === undefined ? {} : { headChunkTokens }),
      });
      lp = st.logprobs.dataSync() as Float32Array;
      ent = st.entropy?.dataSync() as Float32Array | undefined;
      const loss = tf.sum(tf.mul(st.logprobs, w));
      return (st.entropy ? tf.add(loss, tf.sum(tf.mul(st.entropy, tf.neg(w)))) : loss) as tf.Scalar;
    },
    vars.map(([, v]) => v),
  );
  const out = new Map(vars.map(([n, v]) => [n, grads[v.name]!.dataSync() as Float32Array]));
  tf.dispose([value, ids, w, ...Object.values(grads)]);
  return { logprobs: lp!, ...(ent ? { entropy: ent } : {}), grads: out };
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  assert.is(a.length, b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i]! - b[i]!));
  return d;
}

function assertSameRun(got: Run, want: Run): void {
  assert.ok(maxAbsDiff(got.logprobs, want.logprobs) < 1e-5, 'logprobs');
  if (want.entropy) assert.ok(maxAbsDiff(got.entropy!, want.entropy) < 1e-5, 'entropy');
  assert.is(got.grads.size, want.grads.size);
  for (const [name, g] of want.grads) {
    const scale = g.reduce((s, x) => Math.max(s, Math.abs(x)), 0);
    assert.ok(scale > 0, `${name}: a gradient reaches it`);
    const diff = maxAbsDiff(got.grads.get(name)!, g);
    assert.ok(diff <= 1e-5 * scale, `${name}: max |Δ| ${diff} against max |g| ${scale}`);
  }
}

for (const backend of ['cpu', 'torch'] as BackendName[]) {
  for (const [family, config] of Object.entries(configs)) {
    for (const entropy of [false, true]) {
      test(`${backend}, ${family}${entropy ? ', with entropy' : ''}: chunked head = unchunked (values, every weight's gradient)`, async () => {
        await initBackend(backend);
        const m = randomModel(config, 7);
        const plain = run(m, 0, entropy);
        const before = tf.memory().numTensors;
        const chunked = run(m, chunk, entropy);
        assert.is(tf.memory().numTensors, before, 'no tensor outlives the step');
        assertSameRun(chunked, plain);
        m.dispose();
      });
    }
  }

  test(`${backend}: chunkedHead's gradient in the hidden states equals the unchunked head's`, async () => {
    await initBackend(backend);
    const config = configs.qwen3!;
    const m = randomModel(config, 3);
    const N = 13;
    const V = config.vocab_size;
    const hidden = tf.randomNormal([N, config.hidden_size], 0, 1, 'float32', 5) as tf.Tensor2D;
    const targets = tf.tensor1d(
      Array.from({ length: N }, (_, i) => (i * 5) % V),
      'int32',
    );
    const dy = tf.randomNormal([1, N], 0, 1, 'float32', 6);
    const stats = (logits: tf.Tensor3D, t: tf.Tensor2D): tf.Tensor2D =>
      tf.sum(tf.mul(tf.logSoftmax(logits), tf.oneHot(t, V)), -1) as tf.Tensor2D;
    const gradOf = (f: (h: tf.Tensor) => tf.Tensor): Float32Array =>
      tf.tidy(
        () =>
          tf
            .grad((h) => tf.sum(tf.mul(f(h), dy)))(hidden)
            .dataSync() as Float32Array,
      );
    const want = gradOf((h) =>
      stats(
        m.logitsFromHidden(tf.reshape(h, [1, N, config.hidden_size])) as tf.Tensor3D,
        tf.reshape(targets, [1, N]) as tf.Tensor2D,
      ),
    );
    const got = gradOf((h) => m.chunkedHead(h as tf.Tensor2D, targets, 4, stats));
    const scale = want.reduce((s, x) => Math.max(s, Math.abs(x)), 0);
    assert.ok(scale > 0);
    assert.ok(maxAbsDiff(got, want) <= 1e-5 * scale, `max |Δ| ${maxAbsDiff(got, want)}`);
    tf.dispose([hidden, targets, dy]);
    m.dispose();
  });

  test(`${backend}: LoRA + checkpointing chunks the head by default; adapter gradients unchanged`, async () => {
    await initBackend(backend);
    const m = randomModel(configs.llama!, 11);
    const lora = m.attachLora(
      {
        r: 4,
        alpha: 8,
        targetModules: parseTargetModules('all-linear'),
        dropout: 0,
        baseModel: 'base',
      },
      { seed: 2 },
    );
    // B starts at zero (PEFT's init), which would leave every A without a gradient.
    for (const [name, v] of lora.vars)
      if (name.includes('lora_B')) v.assign(tf.randomNormal(v.shape, 0, 0.3, 'float32', 9));
    m.gradientCheckpointing = true;
    m.headChunkTokens = chunk;
    const chunked = run(m, chunk, false);
    const byDefault = run(m, undefined, false);
    m.headChunkTokens = 0;
    const plain = run(m, 0, false);
    assert.ok(
      [...chunked.grads.keys()].every((n) => n.includes('lora_')),
      'only adapters train',
    );
    assertSameRun(chunked, plain);
    // The default (checkpointing on, model.headChunkTokens) is the chunked pass, bit for bit.
    for (const [name, g] of chunked.grads)
      assert.is(maxAbsDiff(byDefault.grads.get(name)!, g), 0, name);
    m.dispose();
  });
}

test.run();
