import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ConfigError, configJson, resolveConfig } from '../../model/config.ts';

const configs = fileURLToPath(new URL('../fixtures/model/configs/', import.meta.url));
const read = (name: string): Record<string, unknown> =>
  JSON.parse(readFileSync(configs + name, 'utf8'));

test('real configs resolve as transformers reads them (v4 and v5 layouts)', () => {
  const q3 = resolveConfig(read('qwen3-0.6b.json'));
  assert.equal(
    [q3.model_type, q3.head_dim, q3.qk_norm, q3.qkv_bias, q3.o_bias, q3.rope_theta],
    ['qwen3', 128, true, false, false, 1e6],
  );
  assert.equal(
    [q3.num_key_value_heads, q3.tie_word_embeddings, q3.rope_scaling.rope_type],
    [8, true, 'default'],
  );
  const l3 = resolveConfig(read('llama-3.2-1b-v5.json'));
  assert.is(l3.rope_theta, 500000, 'theta from rope_parameters (no top-level rope_theta)');
  assert.equal(l3.rope_scaling, {
    rope_type: 'llama3',
    factor: 32,
    low_freq_factor: 1,
    high_freq_factor: 4,
    original_max_position_embeddings: 8192,
  });
  const q2 = resolveConfig(read('qwen2.5-0.5b.json'));
  assert.equal([q2.qkv_bias, q2.o_bias, q2.qk_norm, q2.head_dim], [true, false, false, 64]);
  const m = resolveConfig(read('mistral-7b-v0.3.json'));
  assert.equal([m.model_type, m.head_dim, m.qkv_bias, m.o_bias], ['mistral', 128, false, false]);
  // Qwen3Config's head_dim default is 128, not hidden / heads.
  const { head_dim: _h, ...noHeadDim } = read('qwen3-0.6b.json');
  assert.is(resolveConfig({ ...noHeadDim, hidden_size: 512 }).head_dim, 128);
  // A v4 llama3 rope_scaling reads the same as the v5 block.
  const { rope_parameters: rp, ...v4 } = read('llama-3.2-1b-v5.json') as {
    rope_parameters: Record<string, unknown>;
  };
  const { rope_theta: theta, ...scaling } = rp;
  assert.equal(
    resolveConfig({ ...v4, rope_theta: theta, rope_scaling: scaling }).rope_scaling,
    l3.rope_scaling,
  );
});

test('config.json is written back exactly as read, only the dtype field follows the saved tensors', () => {
  for (const name of [
    'qwen3-0.6b.json',
    'llama-3.2-1b-v5.json',
    'qwen2.5-0.5b.json',
    'mistral-7b-v0.3.json',
  ]) {
    const raw = read(name);
    const field = 'dtype' in raw ? 'dtype' : 'torch_dtype';
    assert.equal(JSON.parse(configJson(resolveConfig(raw), 'bfloat16')), raw, name);
    assert.equal(
      JSON.parse(configJson(resolveConfig(raw), 'float32')),
      { ...raw, [field]: 'float32' },
      name,
    );
    assert.equal(
      Object.keys(JSON.parse(configJson(resolveConfig(raw), 'float32'))),
      Object.keys(raw),
      `${name}: key order`,
    );
  }
});

const refused: [string, (r: Record<string, unknown>) => Record<string, unknown>, RegExp][] = [
  [
    'an unknown model_type',
    (r) => ({ ...r, model_type: 'gemma2' }),
    /model_type 'gemma2' is not supported \(supported: llama, mistral, qwen2, qwen3\)/,
  ],
  [
    'a MoE model_type',
    (r) => ({ ...r, model_type: 'qwen3_moe' }),
    /model_type 'qwen3_moe' is not supported/,
  ],
  [
    'MoE fields',
    (r) => ({ ...r, num_experts: 128 }),
    /'num_experts': mixture-of-experts models are not supported/,
  ],
  ['mlp_bias', (r) => ({ ...r, mlp_bias: true }), /mlp_bias is not supported/],
  [
    'another architecture',
    (r) => ({ ...r, architectures: ['Qwen3ForSequenceClassification'] }),
    /only Qwen3ForCausalLM is supported/,
  ],
  [
    'a sliding window that takes effect',
    (r) => ({ ...r, use_sliding_window: true, sliding_window: 4096, max_window_layers: 20 }),
    /sliding_window 4096 < max_position_embeddings 40960 takes effect on 8 layer\(s\)/,
  ],
  [
    'YaRN (v4 rope_scaling)',
    (r) => ({
      ...r,
      rope_scaling: { rope_type: 'yarn', factor: 4, original_max_position_embeddings: 32768 },
    }),
    /rope_scaling\.rope_type 'yarn' is not supported/,
  ],
  [
    'dynamic NTK (v5 rope_parameters)',
    (r) => ({ ...r, rope_parameters: { rope_type: 'dynamic', factor: 2, rope_theta: 1e6 } }),
    /rope_parameters\.rope_type 'dynamic' is not supported/,
  ],
  [
    'a rope_theta that disagrees with rope_parameters',
    (r) => ({ ...r, rope_parameters: { rope_type: 'default', rope_theta: 1e4 } }),
    /rope_theta 1000000 disagrees with rope_parameters\.rope_theta 10000/,
  ],
  [
    'llama3 scaling without its fields',
    (r) => ({ ...r, rope_scaling: { rope_type: 'llama3', factor: 8 } }),
    /rope_scaling\.low_freq_factor must be a number/,
  ],
  [
    'partial rotary embeddings',
    (r) => ({ ...r, partial_rotary_factor: 0.5 }),
    /partial_rotary_factor 0\.5 is not supported/,
  ],
  [
    'another activation',
    (r) => ({ ...r, hidden_act: 'gelu' }),
    /hidden_act 'gelu' is not supported/,
  ],
  ['a missing size', (r) => ({ ...r, hidden_size: undefined }), /'hidden_size' is missing/],
];
for (const [what, edit, message] of refused) {
  test(`refused with the field and the file named: ${what}`, () => {
    try {
      resolveConfig(edit(read('qwen3-0.6b.json')), '/models/q/config.json');
      assert.unreachable('accepted');
    } catch (e) {
      assert.instance(e, ConfigError);
      assert.match((e as Error).message, /^\/models\/q\/config\.json: /);
      assert.match((e as Error).message, message);
    }
  });
}

test('a Mistral sliding window refused only where it takes effect', () => {
  const mistral = read('mistral-7b-v0.3.json');
  assert.throws(
    () => resolveConfig({ ...mistral, sliding_window: 4096 }),
    /sliding_window 4096 < max_position_embeddings 32768 takes effect on 32 layer/,
  );
  assert.is(resolveConfig({ ...mistral, sliding_window: 32768 }).model_type, 'mistral');
  // Qwen2.5's window is off (use_sliding_window false): accepted.
  assert.is(
    resolveConfig({ ...read('qwen2.5-0.5b.json'), sliding_window: 4096 }).model_type,
    'qwen2',
  );
});

test.run();
