/**
 * `train_ppo`'s LoRA flags: OpenRLHF's names and defaults (rank 0 = off, alpha 16, all-linear),
 * snake case accepted, bad values refused with one line naming the flag, `--load-lora` taking
 * rank, alpha and targets from the adapter, and no reference role for a LoRA policy.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { loraTargetModules, peftTensorName, writeLoraAdapter } from '../../model/lora-adapter.ts';
import { loraSpecOf } from '../../train/lora-flags.ts';
import { parseTrainPpoFlags, trainPpoHelp } from '../../train/ppo/flags.ts';
import { compileRunConfig } from '../../train/ppo/run-config.ts';

test("defaults are OpenRLHF's: rank 0 (full fine-tuning), alpha 16, all-linear", () => {
  const o = parseTrainPpoFlags([]);
  assert.is(o.loraRank, 0);
  assert.is(o.loraAlpha, 16);
  assert.is(o.targetModules, 'all-linear');
  assert.is(loraSpecOf(o, 'base'), undefined);
});

test('snake and kebab case set the adapter the trainer attaches', () => {
  const o = parseTrainPpoFlags([
    '--lora_rank',
    '8',
    '--lora-alpha',
    '32',
    '--target_modules',
    'q_proj,v_proj',
    '--lora-dropout',
    '0.05',
  ]);
  const spec = loraSpecOf(o, '/base', undefined, 3)!;
  assert.equal(spec.config, {
    r: 8,
    alpha: 32,
    targetModules: ['q_proj', 'v_proj'],
    dropout: 0.05,
    baseModel: '/base',
  });
  assert.is(spec.seed, 3);
  assert.equal(loraSpecOf({ ...o, targetModules: 'all-linear' }, '/b')!.config.targetModules, [
    ...loraTargetModules,
  ]);
});

test('bad values fail naming the flag', () => {
  assert.throws(
    () => parseTrainPpoFlags(['--lora-rank', '4', '--target-modules', 'qproj']),
    /--target-modules: unknown LoRA target module 'qproj'/,
  );
  assert.throws(
    () => parseTrainPpoFlags(['--lora-rank', '4', '--lora-dropout', '1']),
    /--lora-dropout must be in \[0, 1\)/,
  );
  assert.throws(() => parseTrainPpoFlags(['--lora-rank', '-1']), /--lora-rank/);
  assert.throws(
    () => parseTrainPpoFlags(['--load-lora', '/nonexistent/adapter']),
    /--load-lora: .* has no adapter_config.json/,
  );
});

test('--load-lora takes rank, alpha and targets from the adapter, and refuses contradicting flags', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-lora-flags-'));
  try {
    const m = 'model.layers.0.self_attn.k_proj';
    writeLoraAdapter(dir, {
      config: { r: 2, alpha: 5, targetModules: ['k_proj'], dropout: 0, baseModel: 'x' },
      tensors: {
        [peftTensorName(m, 'A')]: { shape: [2, 3], data: new Float32Array(6) },
        [peftTensorName(m, 'B')]: { shape: [3, 2], data: new Float32Array(6) },
      },
    });
    const o = parseTrainPpoFlags(['--load-lora', dir, '--init-kl-coef', '0.01']);
    const spec = loraSpecOf(o, '/base')!;
    assert.is(spec.adapterPath, dir);
    assert.equal([spec.config.r, spec.config.alpha, spec.config.targetModules], [2, 5, ['k_proj']]);
    const lora = compileRunConfig(o, 1).roles;
    assert.ok(!lora.reference, 'a LoRA policy needs no reference role: the base is it');
    assert.is(lora.baseAsReference, o.initKlCoef > 0);
    const full = compileRunConfig(parseTrainPpoFlags(['--init-kl-coef', '0.01']), 1).roles;
    assert.equal([full.reference, full.baseAsReference], [true, false]);
    assert.throws(
      () => parseTrainPpoFlags(['--load-lora', dir, '--lora-rank', '4']),
      /drop --lora-rank/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--help says what each LoRA flag does', () => {
  const help = trainPpoHelp();
  for (const f of [
    '--lora-rank',
    '--lora-alpha',
    '--target-modules',
    '--lora-dropout',
    '--load-lora',
  ])
    assert.match(help, new RegExp(`\\n  ${f}\\b[^\\n]*\\S`));
});

test.run();
