/**
 * A Qwen3 checkpoint (real tokenizer and chat template, toy sizes) trains under train_ppo and the
 * policy it saves reloads with exactly the logits of the trainer's final weights.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { trainPpo } from '../../train/ppo/main.ts';
import { tf } from '../../model/backend.ts';
import { loadModel, readWeights } from '../../model/checkpoint.ts';
import { toBf16 } from '../../model/safetensors.ts';
import { Trainer } from '../../roles/trainer.ts';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { maxAbsDiff } from '../fixtures/model/tiny.ts';
import { writeTinyQwen3 } from '../fixtures/model/qwen3.ts';
import type { CausalLM } from '../../model/llama.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-qwen3-train-'));
test.after(() => rmSync(root, { recursive: true, force: true }));
const agent = fileURLToPath(new URL('../fixtures/model/length-reward-step.ts', import.meta.url));
const log = { line: () => {}, metric: () => {} };

function logits(m: CausalLM, ids: number[]): Float32Array {
  return tf.tidy(
    () =>
      m.forward(tf.tensor2d([ids], [1, ids.length], 'int32')).logits!.dataSync() as Float32Array,
  );
}

test('a Qwen3 checkpoint trains 2 steps under train_ppo; the saved policy reloads with identical logits', async () => {
  const base = await writeTinyQwen3(join(root, 'base'), 5);
  const out = join(root, 'out');
  const ckpt = join(root, 'ckpt');
  const s = await trainPpo(
    [
      '--in-process',
      '--pretrain',
      base,
      '--agent-func',
      agent,
      '--rollout-batch-size',
      '2',
      '--n-samples-per-prompt',
      '2',
      '--train-batch-size',
      '4',
      '--micro-train-batch-size',
      '2',
      '--generate-max-len',
      '4',
      '--max-steps',
      '2',
      '--actor-learning-rate',
      '0.01',
      '--eval-dataset',
      '',
      '--save-steps',
      '1',
      '--save-path',
      out,
      '--ckpt-path',
      ckpt,
    ],
    {},
    { log },
  );
  assert.is(s.steps, 2);
  const saved = await loadModel(out);
  const last = await loadModel(join(ckpt, 'global_step_2'));
  const first = await loadModel(base);
  const ids = saved.tokenizer!.encode(
    saved.tokenizer!.applyChatTemplate([{ role: 'user', content: 'What is 2+3?' }], {
      enableThinking: false,
    }),
  );
  assert.is(
    maxAbsDiff(logits(saved.model, ids), logits(last.model, ids)),
    0,
    "saved policy = the trainer's final weights",
  );
  assert.ok(
    maxAbsDiff(logits(saved.model, ids), logits(first.model, ids)) > 1e-4,
    'training changed the policy',
  );
  assert.equal(
    JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')),
    JSON.parse(readFileSync(join(base, 'config.json'), 'utf8')),
  );
  assert.is(saved.tokenizer!.eosTokenId, 151645);
  [saved, last, first].forEach((l) => l.model.dispose());
});

test('--save-dtype bfloat16 reaches the trainer: the policy is written in BF16 with dtype bfloat16', async () => {
  assert.is(parseTrainPpoFlags(['--save-dtype', 'bfloat16']).saveDtype, 'bfloat16');
  assert.is(parseTrainPpoFlags([]).saveDtype, 'float32');
  assert.throws(
    () => parseTrainPpoFlags(['--save-dtype', 'fp8']),
    /--save-dtype: 'fp8' is not one of float32, bfloat16/,
  );
  const src = join(root, 'ckpt', 'global_step_2');
  const trainer = new Trainer({
    pretrain: src,
    learningRate: 0,
    trainBatchSize: 1,
    microTrainBatchSize: 1,
    saveDtype: 'bfloat16',
  });
  await trainer.ready();
  const out = join(root, 'bf16');
  await trainer.saveHf(out);
  trainer.dispose();
  const cfg = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8'));
  assert.is(cfg.torch_dtype, 'bfloat16');
  const f32 = readWeights(src);
  const bf16 = readWeights(out);
  for (const [name, t] of Object.entries(f32)) {
    const rounded = new Float32Array(
      new Uint32Array(Array.from(toBf16(t.data), (h) => h << 16)).buffer,
    );
    assert.is(maxAbsDiff(bf16[name]!.data, rounded), 0, name);
  }
});

test.run();
