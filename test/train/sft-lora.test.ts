/**
 * `train_sft --lora-rank`: the adapter alone trains, checkpoints resume it, and
 * the run saves a PEFT adapter directory naming its base, never a full model; the base directory
 * is left as it was.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { initBackend } from '../../model/backend.ts';
import { tinyMathModelDir } from '../../model/index.ts';
import { readLoraAdapter } from '../../model/lora-adapter.ts';
import { loraFlagDefaults, loraSpecOf } from '../../train/lora-flags.ts';
import { trainSft } from '../../train/sft.ts';

const hash = (f: string): string => createHash('sha256').update(readFileSync(f)).digest('hex');

test('train_sft with LoRA trains and saves only the adapter, and resumes from its checkpoint', async () => {
  await initBackend('wasm');
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-sft-lora-'));
  try {
    const base = tinyMathModelDir;
    const before = hash(join(base, 'model.safetensors'));
    const lora = loraSpecOf({ ...loraFlagDefaults, loraRank: 4, loraAlpha: 16 }, base)!;
    const common = {
      pretrain: base,
      dataset: 'arith',
      datasetSize: 64,
      batchSize: 8,
      microBatchSize: 8,
      lr: 1e-2,
      warmupSteps: 0,
      evalSteps: 0,
      verbose: false,
      lora,
      ckptPath: join(dir, 'ckpt'),
      saveSteps: 3,
    };
    const first = await trainSft({ ...common, maxSteps: 3, savePath: join(dir, 'a') });
    assert.is(first.steps, 3);
    assert.ok(readdirSync(join(dir, 'ckpt')).includes('adapter_model.safetensors'));
    const resumed = await trainSft({ ...common, maxSteps: 6, savePath: join(dir, 'b') });
    assert.is(resumed.steps, 6, 'resumed at step 3 and went on to 6');
    assert.ok(existsSync(join(dir, 'b', 'adapter_config.json')));
    assert.ok(!existsSync(join(dir, 'b', 'model.safetensors')), 'no full model written');
    const a = readLoraAdapter(join(dir, 'b'));
    assert.is(a.config.baseModel, base);
    assert.is(a.config.r, 4);
    assert.is(hash(join(base, 'model.safetensors')), before, 'base untouched');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
