// The driver passes references, not tokens: the rollout puts each group's trajectories once and
// reports numbers and decoded samples; the roles that need tokens fetch them (roles/experience.ts).
// So no file of the train_ppo driver (train/ppo/) reads a token-level field, and no file of train/
// imports the gateway or the tokenizer (it never decodes or parses a tool call again), but the
// listed drivers whose work is text (evaluation, supervised and reward-model training).
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { code, sourceFiles, type SourceFile } from './source-files.ts';

/** Per-token fields of trajectories, experience samples and engine outputs. */
const tokenFields = [
  'inputIds',
  'promptIds',
  'outputTokens',
  'lossMask',
  'actionMask',
  'logprobs',
  'behaviourLogprobs',
  'oldLogprobs',
  'refLogprobs',
  'versions',
];
const field = `(?:${tokenFields.join('|')})`;
/** A read (`t.inputIds`), a key (`{ lossMask: m }`) or a destructuring (`const { versions } =`). */
const fieldUse = new RegExp(
  `\\.${field}\\b(?!\\s*\\()|\\b${field}\\s*:|\\{[^}]*\\b${field}\\b[^}]*\\}\\s*=`,
);
/** Decoding or encoding text: the rollout does it, once. */
const textUse = /\.(decode|encode|applyChatTemplate)\s*\(/;

/** `path:line: text` for each line of `files` whose code reads tokens or decodes text. */
function tokenReads(files: SourceFile[]): string[] {
  const hits: string[] = [];
  for (const f of files) {
    code(f.text)
      .split('\n')
      .forEach((line, i) => {
        if (fieldUse.test(line) || textUse.test(line))
          hits.push(`${f.path}:${i + 1}: ${line.trim()}`);
      });
  }
  return hits;
}

const driver = (): SourceFile[] => sourceFiles().filter((f) => f.path.startsWith('train/ppo/'));

test('no file under train/ppo/ reads a token-level field or decodes text', () => {
  assert.ok(driver().length > 10, 'the driver files are found');
  const hits = tokenReads(driver());
  assert.equal(
    hits,
    [],
    `the driver reads tokens (hand the roles a reference instead):\n${hits.join('\n')}`,
  );
});

test('the check sees field reads, destructuring and decoding, and not comments or method names', () => {
  const probe = (text: string) => tokenReads([{ path: 'train/ppo/x.ts', text }]).length;
  assert.is(probe('const n = t.inputIds.length;'), 1);
  assert.is(probe('const { lossMask } = t;'), 1);
  assert.is(probe('samples.map((s) => s.behaviourLogprobs)'), 1);
  assert.is(probe('const o = { refLogprobs: rows };'), 1);
  assert.is(probe("help('decoupled PPO with proximal logprobs')"), 0, 'help text is no read');
  assert.is(probe('const s = `stale by ${n} versions`;'), 0, 'prose in a template is no read');
  assert.is(probe('const text = tok.decode(ids);'), 1);
  assert.is(probe('// the trainer reads t.inputIds'), 0);
  assert.is(probe('/** inputIds and\n * lossMask */ const a = 1;'), 0);
  assert.is(probe('await roles.reference.logprobsOf(batches);'), 0);
  assert.is(probe('trainer.logprobs(seqs)'), 0, 'a call is a role method, not a field read');
});

/**
 * Files of `train/` that hold text by their nature, each with why; the list only shrinks. None is
 * under `train/ppo/`: the RL driver hands the roles references and reads numbers.
 */
const textDrivers: Readonly<Record<string, string>> = {
  'train/eval-agent.ts':
    'rtjob eval: runs the agent through a gateway of its own over one engine, no roles to ask',
  'train/sft.ts': 'train_sft: a supervised driver tokenizes its own dataset (no rollout does it)',
  'train/sft-data.ts': "train_sft's chat records to token rows",
  'train/sft-model.ts': "train_sft's model and its tokenizer, loaded together",
  'train/rm.ts': 'train_rm: tokenizes its preference pairs (no rollout does it)',
  'train/trackers/otlp.ts': "a type only: the OTLP value shape the gateway's exporter defines",
};

/** `file -> import` for each import of the gateway or the tokenizer by a file of `files`. */
function textImports(files: readonly SourceFile[]): string[] {
  const imports = /(?:from\s+|import\(\s*)['"]([^'"]+)['"]/g;
  return files.flatMap((f) =>
    [...f.text.matchAll(imports)]
      .map((m) => m[1]!)
      .filter((p) => /(^|\/)gateway\//.test(p) || /model\/tokenizer(\.ts)?$/.test(p))
      .map((p) => `${f.path} -> ${p}`),
  );
}

test('train/ imports nothing from the gateway or the tokenizer (but the listed drivers of text)', () => {
  const train = sourceFiles().filter((f) => f.path.startsWith('train/'));
  const bad = textImports(train.filter((f) => !(f.path in textDrivers)));
  assert.equal(bad, [], bad.join('\n'));
  assert.equal(textImports(driver()), [], 'the RL driver, train/ppo/, has no exemption');
  const stale = Object.keys(textDrivers).filter(
    (k) => !textImports(train.filter((f) => f.path === k)).length,
  );
  assert.equal(stale, [], `no longer importing text: take them off the list:\n${stale.join('\n')}`);
  assert.equal(
    textImports([
      { path: 'train/x.ts', text: "import { Gateway } from '../gateway/server.ts';" },
      { path: 'train/y.ts', text: "const t = await import('../model/tokenizer.ts');" },
    ]),
    ['train/x.ts -> ../gateway/server.ts', 'train/y.ts -> ../model/tokenizer.ts'],
  );
});

test.run();
