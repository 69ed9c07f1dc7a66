/**
 * `trainingMemory` (model/memory.ts): the parts of a training step on paper, against values
 * worked out by hand for a small config; checkpointing and a smaller trained set lower what they
 * should and nothing else; the attention's scores by how the backend holds them, a LoRA
 * adapter's products; and the wasm backend refuses, before allocating, a training pass
 * whose activations cannot fit its 4 GiB heap, naming gradient checkpointing as the remedy, as
 * torch on the CPU refuses one past the host memory free at the time.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { resolveConfig } from '../../model/config.ts';
import { CausalLM } from '../../model/llama.ts';
import { parseTargetModules } from '../../model/lora-adapter.ts';
import { attentionLimits } from '../../model/backend-ops.ts';
import {
  layerActivationsPerToken,
  loraActivationsPerToken,
  parameterCount,
  trainingMemory,
} from '../../model/memory.ts';
import { tokenStats } from '../../model/training.ts';
import { readMemory } from '../../runtime/node/memory-monitor.ts';

// hidden 8, intermediate 12, 2 heads × 4, 1 kv head × 4, q/k norms, 3 layers, vocab 10, tied.
const config = resolveConfig({
  model_type: 'qwen3',
  vocab_size: 10,
  hidden_size: 8,
  intermediate_size: 12,
  num_hidden_layers: 3,
  num_attention_heads: 2,
  num_key_value_heads: 1,
  head_dim: 4,
  max_position_embeddings: 1 << 16,
  rms_norm_eps: 1e-6,
  rope_theta: 10000,
  tie_word_embeddings: true,
});

test('parameter count and per-layer activations by hand', () => {
  // embedding 80; per layer: 2 norms 16, q 64, k 32, v 32, q/k norms 8, o 64, gate/up/down 288
  assert.is(parameterCount(config), 80 + 3 * (16 + 64 + 32 + 32 + 8 + 64 + 288) + 8);
  // kept for the gradient: 4·8 hidden-sized, 3·12 intermediate-sized, q and k twice (projected
  // and normed: 2·8 + 2·4), v 4 and the attention's output 8
  assert.is(layerActivationsPerToken(config), 32 + 36 + 24 + 4 + 8);
});

// One row of 100 tokens, 2 heads: 20,000 scores, four copies of one block (all of them here).
const scores = 4 * 2 * 100 * 100;

test('full fine-tuning, plain and checkpointed, and a smaller trained set', () => {
  const P = parameterCount(config);
  const plain = trainingMemory(config, { tokens: 100 });
  assert.is(plain.weightsBytes, 4 * P);
  assert.is(plain.gradientBytes, 4 * P);
  assert.is(plain.optimizerBytes, 8 * P);
  // 3 layers × 104 floats kept, the final norm's 3·8, and the larger of one layer's walk back
  // (4·12 + 2·8, and the scores) and the head's 2·10
  assert.is(plain.activationBytes, 4 * (100 * (3 * 104 + 24) + 100 * 64 + scores));
  // gradients and activations peak apart: as the walk starts back every activation and the
  // head's gradient (the tied embedding, 10 × 8); at its end every gradient, the first layer's
  // phase (its kept tensors, input and walk back, and the scores) and the embedding's two
  // gradients and their sum
  const head = 4 * 80;
  const end = (acts: number) =>
    12 * P + Math.max(acts + head, 4 * P + 4 * (100 * (104 + 8 + 64) + scores) + 2 * head);
  assert.is(plain.totalBytes, end(plain.activationBytes));
  const ckpt = trainingMemory(config, { tokens: 100, gradientCheckpointing: true });
  // each layer's input (8) kept and the final norm's 3·8; then the larger of one layer's kept
  // tensors with its walk back (and the scores) and the head's 2·10
  assert.is(ckpt.activationBytes, 4 * (100 * (3 * 8 + 24) + 100 * (104 + 64) + scores));
  assert.ok(ckpt.activationBytes < plain.activationBytes);
  assert.is(ckpt.weightsBytes + ckpt.gradientBytes + ckpt.optimizerBytes, 16 * P);
  assert.is(ckpt.totalBytes, end(ckpt.activationBytes), 'with checkpointing too');
  const lora = trainingMemory(config, { tokens: 100, trainableParameters: 50 });
  assert.is(lora.weightsBytes, 4 * P);
  assert.is(lora.gradientBytes + lora.optimizerBytes, 12 * 50);
  assert.is(lora.activationBytes, plain.activationBytes);
  assert.is(lora.totalBytes, 4 * P + 12 * 50 + lora.activationBytes, 'a trained subset: the sum');
});

test('a chunked LM head counts its vocabulary rows for one chunk of tokens', () => {
  const wide = resolveConfig({ ...config, vocab_size: 5000 });
  const plain = trainingMemory(wide, { tokens: 100 });
  const chunked = (headChunkTokens: number) =>
    trainingMemory(wide, { tokens: 100, headChunkTokens });
  // 2 vocabulary rows of 5,000 floats for 30 tokens instead of 100
  assert.is(chunked(30).activationBytes, plain.activationBytes - 4 * (100 - 30) * 2 * 5000);
  // a chunk at least as long as the batch is the whole batch
  assert.is(chunked(500).activationBytes, plain.activationBytes);
  assert.is(chunked(0).activationBytes, plain.activationBytes);
});

test("with checkpointing the head's gradient and a layer's do not add: the larger counts", () => {
  const wide = resolveConfig({ ...config, vocab_size: 5000 });
  const at = (headChunkTokens: number) =>
    trainingMemory(wide, { tokens: 100, gradientCheckpointing: true, headChunkTokens })
      .activationBytes;
  const kept = 100 * (3 * 8 + 24);
  const layer = 100 * (104 + 64) + scores;
  assert.is(at(0), 4 * (kept + 100 * 2 * 5000), 'the whole head');
  assert.is(at(30), 4 * (kept + 30 * 2 * 5000), 'a chunk of 30: still the head');
  assert.is(at(5), 4 * (kept + layer), 'a chunk of 5: the layer');
});

test('attention scores: blocks on torch, kept per layer elsewhere, none with fused SDPA', () => {
  const at = (o: Omit<Parameters<typeof trainingMemory>[1], 'tokens'>) =>
    trainingMemory(config, { tokens: 100, ...o }).activationBytes;
  const none = at({ attention: 'fused' });
  assert.is(at({}) - none, 4 * scores);
  // two rows of 50: half the scores of one row of 100
  assert.is(at({ sequenceLength: 50 }) - none, (4 * scores) / 2);
  // kept: each of the 3 layers' probabilities; with checkpointing the recomputed layer's twice
  assert.is(at({ attention: 'kept' }) - none, 4 * 3 * 2 * 100 * 100);
  const ckptNone = at({ attention: 'fused', gradientCheckpointing: true });
  assert.is(at({ attention: 'kept', gradientCheckpointing: true }) - ckptNone, 4 * 2 * 20000);
  const saved = attentionLimits.maxScores;
  attentionLimits.maxScores = 1000;
  try {
    assert.is(at({}) - none, 4 * 4 * 1000, 'four copies of one block');
  } finally {
    attentionLimits.maxScores = saved;
  }
});

test("a LoRA adapter's products count per adapted linear: one rank-sized, and with dropout more", () => {
  const lora = { r: 2, targetModules: parseTargetModules('all-linear') };
  // seven linears × 2
  assert.is(loraActivationsPerToken(config, lora), 14);
  // with dropout (the composed form) two rank-sized products, and the mask and the dropped
  // input: twice the inputs q, k, v, gate, up 8, o 8, down 12
  assert.is(loraActivationsPerToken(config, { ...lora, dropout: 0.1 }), 28 + 2 * 60);
  const plain = trainingMemory(config, { tokens: 100 });
  assert.is(
    trainingMemory(config, { tokens: 100, lora }).activationBytes - plain.activationBytes,
    4 * 100 * 3 * 14,
  );
  const ckpt = trainingMemory(config, { tokens: 100, gradientCheckpointing: true });
  const ckptLora = trainingMemory(config, { tokens: 100, gradientCheckpointing: true, lora });
  // the layer's phase is the larger one here
  assert.is(ckptLora.activationBytes - ckpt.activationBytes, 4 * 100 * 14, 'one layer');
});

/**
 * The one-line error of a training pass over `rows` × 60,000 tokens of a 400-layer cut of the
 * config, refused before anything is allocated.
 */
function refusedPass(rows: number): Error & { code?: string } {
  const m = CausalLM.init({ ...config, num_hidden_layers: 400 }, { seed: 1 });
  const ids = tf.zeros([rows, 60001], 'int32') as tf.Tensor2D;
  const before = tf.memory().numTensors;
  let err: (Error & { code?: string }) | undefined;
  try {
    tokenStats(m, ids);
  } catch (e) {
    err = e as Error & { code?: string };
  }
  assert.is(tf.memory().numTensors, before, 'nothing allocated');
  ids.dispose();
  m.dispose();
  assert.ok(err, 'the pass is refused');
  return err;
}

test('wasm: a training pass whose activations exceed the heap fails first, naming checkpointing', async () => {
  await initBackend('wasm');
  // 400 layers × 104 floats × 4 bytes × 60000 > 4 GiB
  const err = refusedPass(1);
  assert.is(err.code, 'BACKEND_MEMORY');
  assert.match(err.message, /training pass over 1 × 60000 tokens/);
  assert.match(err.message, /--gradient-checkpointing/);
});

test('torch on the CPU: a training pass past the free host memory fails first, in one line', async () => {
  await initBackend('torch');
  // Rows of 60,000 tokens until the pass would need twice what is free now.
  const r = readMemory();
  const layers = resolveConfig({ ...config, num_hidden_layers: 400 });
  const perRow = trainingMemory(layers, { tokens: 60000, sequenceLength: 60000 }).activationBytes;
  const rows = Math.ceil((2 * (r.totalBytes - r.usedBytes)) / perRow);
  const err = refusedPass(rows);
  assert.is(err.code, 'BACKEND_MEMORY');
  assert.match(
    err.message,
    new RegExp(
      `^a training pass over ${rows} × 60000 tokens needs [\\d.]+ GiB of float32 tensors, but (the machine|this process's cgroup) has [\\d.]+ GiB free: add --gradient-checkpointing or train on fewer tokens per micro-batch`,
    ),
  );
  assert.not.match(err.message, /\n/);
});

test.run();
