/**
 * `train_ppo --lora-rank` end to end in one process: with `--init-kl-coef` > 0 no reference role
 * runs (the trainer's base is the reference), each saved step is a PEFT adapter checkpoint, and
 * the policy saved is an adapter directory naming its base.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { tinyMathModelDir } from '../../model/index.ts';
import { readLoraAdapter } from '../../model/lora-adapter.ts';
import { trainPpo } from '../../train/ppo/main.ts';

test('a LoRA run with a KL term trains, checkpoints and saves the adapter alone', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-ppo-lora-'));
  try {
    await trainPpo([
      '--in-process',
      '--max-steps',
      '2',
      '--lora-rank',
      '4',
      '--init-kl-coef',
      '0.01',
      '--rollout-batch-size',
      '2',
      '--n-samples-per-prompt',
      '2',
      '--train-batch-size',
      '4',
      '--micro-train-batch-size',
      '4',
      '--generate-max-len',
      '8',
      '--eval-dataset',
      '',
      '--save-path',
      join(dir, 'policy'),
      '--save-steps',
      '1',
      '--log-samples',
      '0',
    ]);
    const a = readLoraAdapter(join(dir, 'policy'));
    assert.is(a.config.r, 4);
    assert.is(resolve(a.config.baseModel), resolve(tinyMathModelDir));
    assert.ok(!existsSync(join(dir, 'policy', 'model.safetensors')));
    const step = join(dir, 'policy', 'checkpoints', 'global_step_2');
    assert.ok(readdirSync(step).includes('adapter_model.safetensors'), readdirSync(step).join());
    assert.ok(readdirSync(step).includes('optimizer.safetensors'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
