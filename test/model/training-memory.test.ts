/**
 * `trainingMemory` (model/memory.ts): the parts of a training step on paper, against values
 * worked out by hand for a small config; checkpointing and a smaller trained set lower what they
 * should and nothing else; and the wasm backend refuses, before allocating, a training pass
 * whose activations cannot fit its 4 GiB heap, naming gradient checkpointing as the remedy.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { resolveConfig } from '../../model/config.ts';
import { CausalLM } from '../../model/llama.ts';
import { layerActivationsPerToken, parameterCount, trainingMemory } from '../../model/memory.ts';
import { tokenStats } from '../../model/training.ts';

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
  // 10·8 + 5·12 + (4·8 + 4·4) + 8 + 4
  assert.is(layerActivationsPerToken(config), 80 + 60 + 48 + 12);
});

test('full fine-tuning, plain and checkpointed, and a smaller trained set', () => {
  const P = parameterCount(config);
  const plain = trainingMemory(config, { tokens: 100 });
  assert.is(plain.weightsBytes, 4 * P);
  assert.is(plain.gradientBytes, 4 * P);
  assert.is(plain.optimizerBytes, 8 * P);
  // 3 layers × 200 floats, head 4·8 + 2·10 per token
  assert.is(plain.activationBytes, 4 * 100 * (3 * 200 + 52));
  assert.is(plain.totalBytes, 16 * P + plain.activationBytes);
  const ckpt = trainingMemory(config, { tokens: 100, gradientCheckpointing: true });
  // each layer's input (8) kept, one layer's activations twice over
  assert.is(ckpt.activationBytes, 4 * 100 * (3 * 8 + 2 * 200 + 52));
  assert.ok(ckpt.activationBytes < plain.activationBytes);
  assert.is(ckpt.weightsBytes + ckpt.gradientBytes + ckpt.optimizerBytes, 16 * P);
  const lora = trainingMemory(config, { tokens: 100, trainableParameters: 50 });
  assert.is(lora.weightsBytes, 4 * P);
  assert.is(lora.gradientBytes + lora.optimizerBytes, 12 * 50);
  assert.is(lora.activationBytes, plain.activationBytes);
});

test('a chunked LM head counts its vocabulary rows for one chunk of tokens', () => {
  const ckpt = trainingMemory(config, { tokens: 100, gradientCheckpointing: true });
  const chunked = (headChunkTokens: number) =>
    trainingMemory(config, { tokens: 100, gradientCheckpointing: true, headChunkTokens });
  // 2 vocabulary rows of 10 floats for 30 tokens instead of 100
  assert.is(chunked(30).activationBytes, ckpt.activationBytes - 4 * (100 - 30) * 2 * 10);
  // a chunk at least as long as the batch is the whole batch
  assert.is(chunked(500).activationBytes, ckpt.activationBytes);
  assert.is(chunked(0).activationBytes, ckpt.activationBytes);
});

test('wasm: a training pass whose activations exceed the heap fails first, naming checkpointing', async () => {
  await initBackend('wasm');
  const m = CausalLM.init({ ...config, num_hidden_layers: 400 }, { seed: 1 });
  const tokens = 60000; // 400 layers × 200 floats × 4 bytes × 60000 > 4 GiB
  const ids = tf.zeros([1, tokens + 1], 'int32') as tf.Tensor2D;
  const before = tf.memory().numTensors;
  try {
    tokenStats(m, ids);
    assert.unreachable('should refuse');
  } catch (e) {
    const err = e as Error & { code?: string };
    assert.is(err.code, 'BACKEND_MEMORY');
    assert.match(err.message, /training pass over 1 × 60000 tokens/);
    assert.match(err.message, /--gradient-checkpointing/);
  }
  assert.is(tf.memory().numTensors, before, 'nothing allocated');
  ids.dispose();
  m.dispose();
});

test.run();
