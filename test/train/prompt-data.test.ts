/**
 * train_ppo's prompt data through `train/data/`: a GSM8K-shaped directory in the Hub's layout read
 * by split, the OpenRLHF flags that steer it (`--prompt_split`, `--eval_split`,
 * `--prompt_data_probs`, `--max_samples`), the early one-line checks of `rtjob submit`, and chat
 * message prompts, which the rollout renders whole with the chat template.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkKeys, loadPromptData, PromptSampler } from '../../train/ppo/data.ts';
import { parseTrainPpoFlags } from '../../train/ppo/flags.ts';
import { datasetProblem } from '../../train/ppo/paths.ts';
import { Rollout } from '../../roles/rollout.ts';
import { loadTokenizer } from '../../model/tokenizer.ts';
import { gsm8kRows, writeGsm8kDir, writeJsonl } from '../fixtures/data/datasets.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-prompt-data-'));
const gsm8k = writeGsm8kDir(join(root, 'gsm8k'));
const messages = [
  { role: 'system', content: 'Answer with a number.' },
  { role: 'user', content: 'What is 2+3?' },
];
const chatFile = join(root, 'chat.jsonl');
writeJsonl(chatFile, [{ context_messages: messages, answer: '#### 5' }]);

async function flagError(p: Promise<unknown>, re: RegExp): Promise<void> {
  const err = (await p.then(
    () => undefined,
    (e: unknown) => e,
  )) as Error & { code?: string };
  assert.is(err?.code, 'BAD_FLAG', String(err));
  assert.match(err.message, re);
  assert.not.match(err.message, /\n/);
}

test('loadPromptData of a GSM8K directory yields the train split, or the test split', async () => {
  const train = await loadPromptData(gsm8k, '--prompt-data', { split: 'train' });
  assert.equal(train, gsm8kRows(40));
  const held = await loadPromptData(`${gsm8k}@main`, '--eval-dataset', { split: 'test' });
  assert.equal(held, gsm8kRows(12, 1000));
  assert.match(String(held[0]!['answer']), /\n#### 1005$/);
  checkKeys(train, 'question', 'answer', '--prompt-data');
  const item = new PromptSampler(train, { input: 'question', label: 'answer' }, 1).item(3, 'g');
  assert.is(item.prompt, gsm8kRows(40)[3]!.question);
  assert.is(item.label, gsm8kRows(40)[3]!.answer);
});

test('--max_samples and --prompt_data_probs reach the loader', async () => {
  const few = await loadPromptData(gsm8k, '--prompt-data', { maxSamples: 7 });
  assert.equal(few, gsm8kRows(7));
  const blend = await loadPromptData(`${gsm8k},arith`, '--prompt-data', {
    probs: '0.5,0.5',
    size: 40,
    seed: 3,
  });
  const fromGsm = blend.filter((r) => 'question' in r).length;
  assert.ok(fromGsm >= 40 && blend.length - fromGsm >= 40, `${fromGsm} of ${blend.length}`);
});

test('a missing split, config or file is a one-line error of the flag', async () => {
  await flagError(
    loadPromptData(gsm8k, '--eval-dataset', { split: 'validation' }),
    /^--eval-dataset: \S+gsm8k has no split 'validation' \(splits: test, train\)$/,
  );
  await flagError(
    loadPromptData(`${gsm8k}@socratic`, '--prompt-data'),
    /^--prompt-data: \S+gsm8k has no config 'socratic' \(configs: main\)$/,
  );
  await flagError(
    loadPromptData(gsm8k, '--prompt-data', { probs: '0.5,0.5' }),
    /^--prompt-data: probabilities '0\.5,0\.5' must be 1 non-negative numbers/,
  );
});

test('a missing input or label key names the fields there are', async () => {
  const train = await loadPromptData(gsm8k, '--prompt-data');
  assert.throws(
    () => checkKeys(train, 'prompt', 'answer', '--prompt-data'),
    /^--input-key 'prompt' is neither a string field nor chat messages of --prompt-data records \(fields: question, answer\)$/,
  );
  assert.throws(
    () => checkKeys(train, 'question', 'solution', '--prompt-data'),
    /^--label-key 'solution' is not a field of --prompt-data records \(fields: question, answer\)$/,
  );
});

test('the OpenRLHF flags parse, with their defaults (train, test)', () => {
  const d = parseTrainPpoFlags([]);
  assert.equal(
    [d.promptSplit, d.evalSplit, d.maxSamples, d.promptDataProbs],
    ['train', 'test', undefined, undefined],
  );
  const o = parseTrainPpoFlags([
    '--prompt_data',
    'a.parquet,b.jsonl',
    '--prompt_data_probs',
    '0.7,0.3',
    '--prompt_split',
    'train_sft',
    '--eval_split',
    'validation',
    '--max_samples',
    '1000',
  ]);
  assert.equal(
    [o.promptData, o.promptDataProbs, o.promptSplit, o.evalSplit, o.maxSamples],
    ['a.parquet,b.jsonl', '0.7,0.3', 'train_sft', 'validation', 1000],
  );
});

test('rtjob submit checks a dataset spec by its layout, before any cluster starts', () => {
  assert.is(datasetProblem(gsm8k, '--prompt-data', root, 'train'), undefined);
  assert.is(datasetProblem('gsm8k@main,arith', '--prompt-data', root, 'test'), undefined);
  assert.match(
    datasetProblem('gsm8k', '--eval-dataset', root, 'dev') ?? '',
    /^--eval-dataset: \S+gsm8k has no split 'dev' \(splits: test, train\)$/,
  );
  assert.match(
    datasetProblem('./org/missing', '--prompt-data', root) ?? '',
    /^--prompt-data: '\.\/org\/missing' is neither a built-in dataset \(arith, arith:train, arith:test\) nor a file or directory$/,
  );
  // `org/missing` names a Hub dataset: checked once fetched, or now when offline and not cached.
  assert.is(datasetProblem('org/missing', '--prompt-data', root, 'train', {}), undefined);
});

test('chat-message prompts: the item carries them; without the chat template they are refused', async () => {
  const records = await loadPromptData(chatFile, '--prompt-data');
  checkKeys(records, 'context_messages', 'answer', '--prompt-data');
  const item = new PromptSampler(records, { input: 'context_messages', label: 'answer' }, 0).item(
    0,
    'g',
  );
  assert.equal(item.messages, messages);
  assert.is(item.prompt, 'What is 2+3?', 'its text is the last user message');
  assert.throws(
    () => checkKeys(records, 'context_messages', 'answer', '--prompt-data', false),
    /^--input-key 'context_messages' of --prompt-data holds chat messages: they need --apply-chat-template$/,
  );
});

test("the rollout renders a conversation prompt whole with the model's chat template", async () => {
  const model = await writeTinyModel(join(root, 'model'));
  const rollout = new Rollout({
    pretrain: model,
    generateMaxLen: 4,
    promptMaxLen: 256,
    nSamplesPerPrompt: 1,
  });
  try {
    await rollout.ready();
    const tok = loadTokenizer(model);
    const sample = rollout.sample({ index: 0, prompt: 'What is 2+3?', messages, groupId: 'g' });
    assert.equal(sample.promptIds, tok.encode(tok.applyChatTemplate(messages)));
    const plain = rollout.sample({ index: 0, prompt: 'What is 2+3?', groupId: 'g' });
    assert.equal(plain.promptIds, tok.encode(tok.applyChatTemplate([messages[1]!])));
    assert.not.equal(sample.promptIds, plain.promptIds, 'the system message is in the prompt');
  } finally {
    await rollout.close();
  }
});

test.after(() => rmSync(root, { recursive: true, force: true }));
test.run();
