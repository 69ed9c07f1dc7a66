/**
 * LoRA across the project's edge, checked against PyTorch (Debian's python3-torch; HF PEFT itself
 * cannot be installed here, so the PEFT-shaped fixture is built with PEFT's tensor names, dtype
 * and config fields by test/fixtures/model/peft_lora.py):
 * - the adapter a LoRA trainer saves merges outside rtjob (torch, W + alpha/r·B·A, its own
 *   safetensors reader) into weights whose logits equal what rtjob serves with base + adapter,
 *   and `rtjob merge-lora` writes the same model;
 * - an adapter laid out as HF PEFT writes it (bf16, `base_model.model.…lora_A.weight`, PEFT's
 *   config) loads and gives the merged model's logits and greedy tokens.
 * Fails (does not skip) when python3 with torch is missing.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import { initBackend, tf } from '../../model/backend.ts';
import { loadModel, mergeLoraCheckpoint, readConfig, readWeights } from '../../model/checkpoint.ts';
import { CausalLM } from '../../model/llama.ts';
import { readLoraAdapter } from '../../model/lora-adapter.ts';
import { readSafetensorsFile } from '../../model/safetensors.ts';
import { padBatch } from '../../model/training.ts';
import { Trainer } from '../../roles/trainer.ts';
import { maxAbsDiff } from '../fixtures/model/tiny.ts';

const base = fileURLToPath(new URL('../../model/pretrained/rtjob-tiny-math', import.meta.url));
const script = fileURLToPath(new URL('../fixtures/model/peft_lora.py', import.meta.url));
const torchPy = (...args: string[]): void => {
  execFileSync('/usr/bin/python3', [script, ...args], { stdio: ['ignore', 'ignore', 'inherit'] });
};
const seqs = [
  [2, 25, 23, 15, 25, 26, 3, 30, 31],
  [2, 40, 41, 13, 45, 3, 50, 51, 52],
];
const logitsOf = (m: CausalLM): Float32Array =>
  tf.tidy(() => m.forward(padBatch(seqs).ids, { grad: false }).logits!.dataSync() as Float32Array);

const dirs: string[] = [];
const tmp = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'rtjob-lora-interop-'));
  dirs.push(d);
  return d;
};

test('python3 with torch is installed (Debian python3-torch)', () => {
  const v = execFileSync('/usr/bin/python3', ['-c', 'import torch; print(torch.__version__)'], {
    encoding: 'utf8',
  });
  assert.match(v, /^\d+\.\d+/);
});

test('an adapter a LoRA trainer saves merges in torch into the model rtjob serves as base + adapter', async () => {
  await initBackend('wasm');
  const trainer = new Trainer({
    pretrain: base,
    learningRate: 5e-2,
    trainBatchSize: 2,
    microTrainBatchSize: 2,
    lora: {
      config: {
        r: 4,
        alpha: 32,
        targetModules: [
          'q_proj',
          'k_proj',
          'v_proj',
          'o_proj',
          'gate_proj',
          'up_proj',
          'down_proj',
        ],
        dropout: 0,
        baseModel: base,
      },
      seed: 7,
    },
  });
  await trainer.ready();
  const old = await trainer.logprobs(seqs);
  for (let i = 0; i < 3; i++)
    await trainer.train(
      seqs.map((s, k) => ({
        inputIds: s,
        actionMask: s.slice(1).map((_, t) => (t >= 6 ? 1 : 0)),
        advantages: s.slice(1).map(() => (k === 0 ? 1 : -1)),
        oldLogprobs: old[k]!,
      })),
    );
  const dir = tmp();
  await trainer.saveHf(join(dir, 'adapter'));
  trainer.dispose();
  torchPy('merge', join(dir, 'adapter'), base, join(dir, 'merged.safetensors'));
  const merged = CausalLM.fromTensors(
    readConfig(base),
    readSafetensorsFile(join(dir, 'merged.safetensors')).tensors,
  );
  // What `rtjob serve --pretrain BASE --lora DIR` runs: the base, the adapter as a weight update.
  const served = CausalLM.fromTensors(readConfig(base), readWeights(base));
  const engine = await BuiltinEngine.create({ model: served });
  await engine.updateWeights({ kind: 'lora', adapter: readLoraAdapter(join(dir, 'adapter')) }, 1);
  const d = maxAbsDiff(logitsOf(served), logitsOf(merged));
  assert.ok(d < 1e-4, `torch-merged vs served logits differ by ${d}`);
  assert.ok(
    maxAbsDiff(
      logitsOf(merged),
      logitsOf(CausalLM.fromTensors(readConfig(base), readWeights(base))),
    ) > 1e-2,
    'the adapter matters',
  );
  // rtjob merge-lora writes the same model (base from the adapter config).
  mergeLoraCheckpoint(join(dir, 'adapter'), { savePath: join(dir, 'rtjob-merged') });
  const { model: ours } = await loadModel(join(dir, 'rtjob-merged'));
  assert.ok(maxAbsDiff(logitsOf(ours), logitsOf(merged)) < 1e-5, 'merge-lora = torch merge');
  await engine.close();
  [merged, served, ours].forEach((m) => m.dispose());
});

test("an adapter laid out as HF PEFT writes it (bf16, PEFT config) gives the merged model's logits and tokens", async () => {
  await initBackend('wasm');
  const dir = tmp();
  torchPy('make', base, dir, '8', '12', '3');
  torchPy('merge', dir, base, join(dir, 'merged.safetensors'));
  const adapter = readLoraAdapter(dir);
  assert.equal([adapter.config.r, adapter.config.alpha, adapter.config.dropout], [8, 12, 0.05]);
  assert.equal([...adapter.config.targetModules].sort(), [
    'down_proj',
    'gate_proj',
    'q_proj',
    'v_proj',
  ]);
  const merged = CausalLM.fromTensors(
    readConfig(base),
    readSafetensorsFile(join(dir, 'merged.safetensors')).tensors,
  );
  const engine = await BuiltinEngine.create({ modelPath: base });
  await engine.updateWeights({ kind: 'lora', adapter }, 1);
  const plain = CausalLM.fromTensors(readConfig(base), readWeights(base));
  plain.loadLora(adapter);
  const d = maxAbsDiff(logitsOf(plain), logitsOf(merged));
  assert.ok(d < 1e-4, `PEFT adapter vs merged logits differ by ${d}`);
  const mergedEngine = await BuiltinEngine.create({ model: merged });
  const g = { maxNewTokens: 16, greedy: true };
  const a = await engine.generate({ inputIds: seqs[0]!.slice(0, 7), gconfig: g });
  const b = await mergedEngine.generate({ inputIds: seqs[0]!.slice(0, 7), gconfig: g });
  assert.equal(a.outputTokens, b.outputTokens);
  assert.ok(maxAbsDiff(a.outputLogprobs, b.outputLogprobs) < 1e-4);
  await Promise.all([engine.close(), mergedEngine.close()]);
  [merged, plain].forEach((m) => m.dispose());
});

test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

test.run();
