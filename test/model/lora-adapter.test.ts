import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import {
  mergeLoraAdapter,
  parseTargetModules,
  peftTensorName,
  readLoraAdapter,
  writeLoraAdapter,
  type LoraAdapter,
} from '../../model/lora-adapter.ts';
import { serializeSafetensors } from '../../model/safetensors.ts';

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'rtjob-lora-'));
  dirs.push(d);
  return d;
};

const mod = 'model.layers.0.self_attn.q_proj';
const adapter: LoraAdapter = {
  config: { r: 1, alpha: 2, targetModules: ['q_proj'], dropout: 0, baseModel: '/ckpt/base' },
  tensors: {
    // A: [r=1, in=3], B: [out=2, r=1]
    [peftTensorName(mod, 'A')]: { shape: [1, 3], data: Float32Array.from([1, 2, 3]) },
    [peftTensorName(mod, 'B')]: { shape: [2, 1], data: Float32Array.from([0.5, -1]) },
  },
};

test('PEFT tensor names follow PEFT (base_model.model.<module>.lora_A.weight)', () => {
  assert.is(
    peftTensorName(mod, 'A'),
    'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight',
  );
});

test('merge computes W + alpha/r * B A in [out, in] layout, worked by hand', () => {
  const base = {
    [`${mod}.weight`]: { shape: [2, 3], data: Float32Array.from([1, 0, 0, 0, 1, 0]) },
    'model.norm.weight': { shape: [3], data: Float32Array.from([1, 1, 1]) },
  };
  const merged = mergeLoraAdapter(base, adapter);
  // scale 2; B A = [[0.5, 1, 1.5], [-1, -2, -3]] -> x2 = [[1, 2, 3], [-2, -4, -6]]
  assert.equal(Array.from(merged[`${mod}.weight`]!.data), [2, 2, 3, -2, -3, -6]);
  assert.is(merged['model.norm.weight'], base['model.norm.weight']);
  assert.equal(Array.from(base[`${mod}.weight`].data), [1, 0, 0, 0, 1, 0], 'base untouched');
});

test('an adapter round-trips through the PEFT directory format', () => {
  const d = tmp();
  writeLoraAdapter(d, adapter);
  const cfg = JSON.parse(readFileSync(join(d, 'adapter_config.json'), 'utf8'));
  assert.is(cfg.peft_type, 'LORA');
  assert.is(cfg.r, 1);
  assert.is(cfg.lora_alpha, 2);
  assert.equal(cfg.target_modules, ['q_proj']);
  assert.is(cfg.base_model_name_or_path, '/ckpt/base');
  const back = readLoraAdapter(d);
  assert.equal(back.config, adapter.config);
  assert.equal(Object.keys(back.tensors).sort(), Object.keys(adapter.tensors).sort());
  assert.equal(Array.from(back.tensors[peftTensorName(mod, 'B')]!.data), [0.5, -1]);
});

test("PEFT's '.default' in-memory names are read as the saved names", () => {
  const d = tmp();
  writeFileSync(
    join(d, 'adapter_config.json'),
    JSON.stringify({ peft_type: 'LORA', r: 1, lora_alpha: 1, target_modules: ['q_proj'] }),
  );
  writeFileSync(
    join(d, 'adapter_model.safetensors'),
    serializeSafetensors({
      [`base_model.model.${mod}.lora_A.default.weight`]: {
        shape: [1, 3],
        data: Float32Array.from([1, 2, 3]),
      },
      [`base_model.model.${mod}.lora_B.default.weight`]: {
        shape: [2, 1],
        data: Float32Array.from([0, 0]),
      },
    }),
  );
  const a = readLoraAdapter(d);
  assert.ok(a.tensors[peftTensorName(mod, 'A')]);
  assert.is(a.config.alpha, 1);
});

test('adapters rtjob cannot apply are refused with the reason', () => {
  const d = tmp();
  writeLoraAdapter(d, adapter);
  const cfg = JSON.parse(readFileSync(join(d, 'adapter_config.json'), 'utf8'));
  writeFileSync(join(d, 'adapter_config.json'), JSON.stringify({ ...cfg, use_dora: true }));
  assert.throws(() => readLoraAdapter(d), /DoRA/);
  writeFileSync(join(d, 'adapter_config.json'), JSON.stringify({ ...cfg, r: 4 }));
  assert.throws(() => readLoraAdapter(d), /not rank 4/);
  assert.throws(() => readLoraAdapter(join(d, 'nope')), /adapter_config\.json not found/);
});

test('--target-modules: all-linear, a list, and an unknown name', () => {
  assert.is(parseTargetModules('all-linear').length, 7);
  assert.equal(parseTargetModules('q_proj, v_proj,q_proj'), ['q_proj', 'v_proj']);
  assert.throws(() => parseTargetModules('qkv'), /unknown LoRA target module 'qkv'/);
});

test.after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

test.run();
