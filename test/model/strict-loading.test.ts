/**
 * Loading is strict: a tensor the config does not use, or one it needs and the file lacks, is an
 * error naming the tensor and the file, in both loaders (`loadModel` → `fromTensors`, and
 * `importWeights`), so a checkpoint is never loaded and then computed differently.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend, tf } from '../../model/backend.ts';
import { loadModel, readWeights, saveModel } from '../../model/checkpoint.ts';
import { resolveConfig } from '../../model/config.ts';
import { decodeStep, prefill } from '../../model/kv-cache.ts';
import { parseSafetensors, serializeSafetensors } from '../../model/safetensors.ts';
import { forwardLogprobs } from '../../model/sequence-logprobs.ts';
import { maxAbsDiff, randomModel, tinyFamilyConfigs } from '../fixtures/model/tiny.ts';
import type { CausalLM } from '../../model/llama.ts';

const dirs: string[] = [];
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
const families = tinyFamilyConfigs();
const [llamaV4, , , , qwen3] = Object.values(families) as Record<string, unknown>[];

async function saved(
  raw: Record<string, unknown>,
  seed: number,
): Promise<{ dir: string; model: CausalLM }> {
  await initBackend('wasm');
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-strict-'));
  dirs.push(dir);
  const model = randomModel(resolveConfig(raw), seed);
  saveModel(dir, model);
  return { dir, model };
}

async function loadError(dir: string): Promise<string> {
  return loadModel(dir).then(
    (l) => (l.model.dispose(), 'loaded'),
    (e: Error) => e.message,
  );
}

const editTensors = (dir: string, edit: (t: ReturnType<typeof readWeights>) => void): void => {
  const t = readWeights(dir);
  edit(t);
  writeFileSync(join(dir, 'model.safetensors'), serializeSafetensors(t));
};

test('a Qwen3 checkpoint whose config says llama is refused: q_norm would be dropped', async () => {
  const { dir, model } = await saved(qwen3!, 1);
  model.dispose();
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({ ...cfg, model_type: 'llama', architectures: ['LlamaForCausalLM'] }),
  );
  const msg = await loadError(dir);
  assert.match(
    msg,
    new RegExp(
      `^${join(dir, 'model.safetensors')}: tensor 'model\\.layers\\.0\\.self_attn\\.q_norm\\.weight' is not used by this llama model`,
    ),
  );
});

test('o_proj.bias in the file but attention_bias false in the config is refused', async () => {
  const { dir, model } = await saved(llamaV4!, 2);
  model.dispose();
  editTensors(dir, (t) => {
    for (const n of Object.keys(t)) if (/[qkv]_proj\.bias$/.test(n)) delete t[n];
  });
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...cfg, attention_bias: false }));
  assert.match(
    await loadError(dir),
    /model\.safetensors: tensor 'model\.layers\.0\.self_attn\.o_proj\.bias' is not used/,
  );
});

test('a missing tensor is named with the file; a misshapen one with both shapes', async () => {
  const { dir, model } = await saved(llamaV4!, 3);
  model.dispose();
  const up = 'model.layers.1.mlp.up_proj.weight';
  const full = readWeights(dir);
  editTensors(dir, (t) => delete t[up]);
  assert.match(
    await loadError(dir),
    new RegExp(`model\\.safetensors: missing tensor '${up.replace(/\./g, '\\.')}'`),
  );
  editTensors(dir, (t) => (t[up] = { shape: [3, 8], data: new Float32Array(24) }));
  assert.match(
    await loadError(dir),
    /tensor 'model\.layers\.1\.mlp\.up_proj\.weight' has shape \[3,8\], config implies \[24,16\]/,
  );
  editTensors(dir, (t) => Object.assign(t, full));
  assert.is(await loadError(dir), 'loaded');
});

test("tensors transformers ignores load: a tied model's lm_head.weight, rotary_emb.inv_freq", async () => {
  const { dir, model } = await saved(qwen3!, 4);
  const emb = readWeights(dir)['model.embed_tokens.weight']!;
  editTensors(dir, (t) => {
    t['lm_head.weight'] = emb;
    t['model.layers.0.self_attn.rotary_emb.inv_freq'] = { shape: [4], data: new Float32Array(4) };
  });
  const loaded = await loadModel(dir);
  const ids = tf.tensor2d([[1, 2, 3]], [1, 3], 'int32');
  const logits = (m: CausalLM): Float32Array =>
    tf.tidy(() => m.forward(ids).logits!.dataSync() as Float32Array);
  assert.is(maxAbsDiff(logits(loaded.model), logits(model)), 0);
  ids.dispose();
  loaded.model.dispose();
  model.dispose();
});

test('in a sharded checkpoint the error names the shard that holds the tensor', async () => {
  const { dir, model } = await saved(llamaV4!, 5);
  saveModel(dir, model, { maxShardBytes: 4000 });
  model.dispose();
  const index = JSON.parse(readFileSync(join(dir, 'model.safetensors.index.json'), 'utf8'));
  const last = index.weight_map['lm_head.weight'] as string;
  const shard = parseSafetensors(readFileSync(join(dir, last))).tensors;
  shard['model.layers.9.mlp.up_proj.weight'] = { shape: [1], data: new Float32Array(1) };
  writeFileSync(join(dir, last), serializeSafetensors(shard));
  index.weight_map['model.layers.9.mlp.up_proj.weight'] = last;
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify(index));
  assert.match(
    await loadError(dir),
    new RegExp(
      `^${join(dir, last)}: tensor 'model\\.layers\\.9\\.mlp\\.up_proj\\.weight' is not used`,
    ),
  );
});

test('importWeights applies the same rule (unknown, misshapen, missing when strict)', async () => {
  await initBackend('wasm');
  const m = randomModel(resolveConfig(qwen3!), 6);
  const w = m.exportWeights();
  assert.throws(
    () =>
      m.importWeights(
        { ...w, 'model.layers.0.mlp.gate_proj.bias': { shape: [24], data: new Float32Array(24) } },
        { source: 'update.safetensors' },
      ),
    /^update\.safetensors: tensor 'model\.layers\.0\.mlp\.gate_proj\.bias' is not used by this qwen3 model/,
  );
  const { ['model.layers.1.self_attn.k_norm.weight']: _k, ...partial } = w;
  assert.throws(
    () => m.importWeights(partial),
    /missing tensor 'model\.layers\.1\.self_attn\.k_norm\.weight'/,
  );
  m.importWeights(partial, { strict: false });
  assert.throws(
    () =>
      m.importWeights(
        { 'model.norm.weight': { shape: [8], data: new Float32Array(8) } },
        { strict: false },
      ),
    /has shape \[8\], config implies \[16\]/,
  );
  // A critic's value head sent to a policy is ignored, as before.
  m.importWeights({ ...w, 'value_head.weight': { shape: [1, 16], data: new Float32Array(16) } });
  m.dispose();
});

test('an over-long prompt fails with the model message in forward, prefill, decode and scoring', async () => {
  await initBackend('wasm');
  const m = randomModel(resolveConfig(qwen3!), 7); // max_position_embeddings 64
  const long = Array.from({ length: 65 }, (_, i) => i % 40);
  const message = /sequence of 65 tokens exceeds max_position_embeddings 64/;
  assert.throws(
    () => tf.tidy(() => m.forward(tf.tensor2d([long], [1, 65], 'int32')).logits!),
    message,
  );
  assert.throws(() => prefill(m, [long.slice(0, 10), long]), message);
  assert.throws(() => forwardLogprobs(m, [[...long, 1]]), /sequence of 65 tokens/);
  const { cache } = prefill(m, [long.slice(0, 64)]);
  assert.throws(() => decodeStep(m, cache, [1]), message);
  cache.dispose();
  m.dispose();
});

test('a config this model does not implement is refused by loadModel with the file named', async () => {
  const { dir, model } = await saved(qwen3!, 8);
  model.dispose();
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({ ...cfg, rope_scaling: { rope_type: 'yarn', factor: 4 } }),
  );
  assert.match(
    await loadError(dir),
    new RegExp(`^${join(dir, 'config.json')}: rope_scaling\\.rope_type 'yarn' is not supported`),
  );
});

test.run();
