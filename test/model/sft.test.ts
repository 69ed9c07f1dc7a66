import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BuiltinEngine } from '../../engines/builtin/engine.ts';
import { initBackend } from '../../model/backend.ts';
import { builtinTokenizerFiles } from '../../model/builtin.ts';
import { loadModel, saveModel } from '../../model/checkpoint.ts';
import { tinyMathModelDir } from '../../model/index.ts';
import { ChatTokenizer } from '../../model/tokenizer.ts';
import { arithDataset } from '../../train/data/arith.ts';
import { encodeConversation, evalArith, sftConversations, trainSft } from '../../train/sft.ts';
import { randomModel, tinyLlamaConfig } from '../fixtures/model/tiny.ts';

const dirs: string[] = [];
const tmp = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'rtjob-sft-'));
  dirs.push(d);
  return d;
};
test.after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

test('loss mask covers exactly the assistant turns, including their end token', () => {
  const f = builtinTokenizerFiles();
  const tok = new ChatTokenizer(f.tokenizerJson, f.tokenizerConfig);
  const { ids, mask } = encodeConversation(tok, [
    { role: 'user', content: 'q?' },
    { role: 'assistant', content: 'ok' },
  ]);
  assert.is(tok.decode(ids), '<|user|>q?<|assistant|>ok<|end|>');
  assert.equal(mask, [0, 0, 0, 0, 1, 1, 1]);
});

test('train_sft on a JSONL file lowers the loss, checkpoints, resumes and writes an HF directory', async () => {
  await initBackend('wasm');
  const dir = tmp();
  const f = builtinTokenizerFiles();
  const tok = new ChatTokenizer(f.tokenizerJson, f.tokenizerConfig);
  const start = randomModel(
    tinyLlamaConfig({ vocab_size: tok.vocabSize, max_position_embeddings: 64, eos_token_id: 1 }),
    51,
  );
  saveModel(join(dir, 'init'), start, { tokenizerFiles: f });
  start.dispose();
  const lines = arithDataset({ size: 64 }).map((r, i) =>
    i % 2
      ? JSON.stringify({ prompt: r.prompt, response: r.response })
      : JSON.stringify({
          messages: [
            { role: 'user', content: r.prompt },
            { role: 'assistant', content: r.response },
          ],
        }),
  );
  writeFileSync(join(dir, 'data.jsonl'), lines.join('\n') + '\n');
  const common = {
    pretrain: join(dir, 'init'),
    dataset: join(dir, 'data.jsonl'),
    ckptPath: join(dir, 'ckpt'),
    saveSteps: 5,
    batchSize: 16,
    microBatchSize: 8,
    lr: 1e-2,
    warmupSteps: 2,
    verbose: false,
  };
  const first = await trainSft({ ...common, savePath: join(dir, 'out'), maxSteps: 5 });
  assert.is(first.steps, 5);
  const resumed = await trainSft({ ...common, savePath: join(dir, 'out'), maxSteps: 12 });
  assert.is(resumed.steps, 12, 'resumed at step 5 and ran to 12');
  assert.ok(resumed.finalLoss < first.finalLoss, `loss ${first.finalLoss} -> ${resumed.finalLoss}`);
  for (const file of [
    'config.json',
    'model.safetensors',
    'tokenizer.json',
    'tokenizer_config.json',
    'generation_config.json',
  ]) {
    assert.ok(existsSync(join(dir, 'out', file)), file);
  }
  assert.is(JSON.parse(readFileSync(join(dir, 'ckpt', 'trainer_state.json'), 'utf8')).step, 12);
});

test('--direct-fraction mixes direct and worked answers per record, reproducibly, and only for built-in data', async () => {
  const mixed = await sftConversations('arith', 2000, 0.7, 7);
  const answers = mixed.map((c) => c.messages[1]!.content);
  const direct = answers.filter((a) => /^The answer is -?\d+\.$/.test(a)).length;
  assert.ok(direct > 0.66 * 2000 && direct < 0.74 * 2000, `direct ${direct}/2000`);
  assert.ok(answers.every((a) => /The answer is -?\d+\.$/.test(a)));
  assert.equal(await sftConversations('arith', 2000, 0.7, 7), mixed, 'same seed, same mix');
  assert.ok(
    (await sftConversations('arith', 50, 0)).every(
      (c) => !c.messages[1]!.content.startsWith('The answer'),
    ),
    'fraction 0: all worked',
  );
  assert.throws(() => sftConversations('/no/such.jsonl', 10, 0.5), /built-in datasets only/);
  assert.throws(() => sftConversations('arith', 10, 1.5), /\[0, 1\]/);
});

test('the shipped warm start answers parseably, is right on some held-out problems, and knows both strategies', async () => {
  await initBackend('wasm');
  const { model, tokenizer } = await loadModel(tinyMathModelDir);
  assert.ok(tokenizer);
  assert.ok(model.numParameters > 2e5 && model.numParameters < 1e6);
  const engine = await BuiltinEngine.create({ model, tokenizer });
  const records = arithDataset({ split: 'test', size: 100 });
  const { accuracy, samples } = await evalArith(engine, tokenizer!, records);
  const parseable = samples.filter((s) => /The answer is -?\d+/.test(s.output)).length;
  assert.ok(parseable >= 90, `parseable ${parseable}/100`);
  assert.ok(accuracy >= 0.05 && accuracy <= 0.6, `held-out greedy accuracy ${accuracy}`);
  // Sampled at T=1, some answers work the sum out first and some state the answer directly.
  const sampled = await evalArith(engine, tokenizer!, records, { greedy: false });
  const worked = sampled.samples.filter((s) => /^\d/.test(s.output)).length;
  assert.ok(worked >= 10 && worked <= 60, `worked answers ${worked}/100`);
  await engine.close();
  model.dispose();
});

test.run();
