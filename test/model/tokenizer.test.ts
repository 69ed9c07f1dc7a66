import { mkdtempSync, rmSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { builtinTokenizerFiles, builtinVocabSize } from '../../model/builtin.ts';
import { ChatTokenizer, loadTokenizer } from '../../model/tokenizer.ts';

const bpeDir = fileURLToPath(new URL('../fixtures/model/bpe/', import.meta.url));
const builtin = (): ChatTokenizer => {
  const f = builtinTokenizerFiles();
  return new ChatTokenizer(f.tokenizerJson, f.tokenizerConfig);
};

test('built-in tokenizer: one id per character, exact round trip, special tokens are single ids', () => {
  const tok = builtin();
  assert.is(tok.vocabSize, builtinVocabSize);
  const text = 'Ann has 7 apples, gets 12 more!\nWhat is 47+38? {x} ~';
  const ids = tok.encode(text);
  assert.is(ids.length, text.length);
  assert.is(tok.decode(ids), text);
  const chat = tok.applyChatTemplate([{ role: 'user', content: 'What is 2+3?' }]);
  assert.is(chat, '<|user|>What is 2+3?<|assistant|>');
  const cid = tok.encode(chat);
  assert.is(cid[0], tok.tokenToId('<|user|>'));
  assert.is(cid[cid.length - 1], tok.tokenToId('<|assistant|>'));
  assert.is(cid.length, 2 + 'What is 2+3?'.length);
  assert.is(tok.decode(cid, { skipSpecialTokens: true }), 'What is 2+3?');
  assert.is(tok.eosTokenId, 1);
  assert.is(tok.padTokenId, 0);
});

test('built-in chat template: a finished assistant turn ends with the eos token', () => {
  const tok = builtin();
  const s = tok.applyChatTemplate(
    [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'a' },
      { role: 'user', content: 'again' },
    ],
    { addGenerationPrompt: true },
  );
  assert.is(s, '<|user|>q<|assistant|>a<|end|><|user|>again<|assistant|>');
});

test('byte-level BPE: merges apply, non-ASCII round-trips, ChatML specials are single ids', () => {
  const tok = loadTokenizer(bpeDir);
  const text = 'the cat is a café';
  const ids = tok.encode(text);
  assert.ok(ids.length < Buffer.byteLength(text), 'merges shorten the sequence');
  assert.is(tok.decode(ids), text);
  const chat = tok.applyChatTemplate([{ role: 'user', content: 'Hi é!' }]);
  assert.is(chat, '<|im_start|>user\nHi é!<|im_end|>\n<|im_start|>assistant\n');
  const cid = tok.encode(chat);
  assert.is(cid[0], tok.tokenToId('<|im_start|>'));
  assert.ok(cid.includes(tok.tokenToId('<|im_end|>')!));
  assert.is(tok.decode(cid), chat);
  assert.is(tok.decode(cid, { skipSpecialTokens: true }), 'user\nHi é!\nassistant\n');
  assert.is(tok.eosTokenId, tok.tokenToId('<|im_end|>'));
});

test('named templates: default and tool_use (with tools); unknown names are an error', () => {
  const tok = loadTokenizer(bpeDir);
  assert.equal(tok.templateNames, ['default', 'tool_use']);
  const s = tok.applyChatTemplate([{ role: 'user', content: 'x' }], {
    templateName: 'tool_use',
    tools: [{ name: 'calc' }, { name: 'search' }],
  });
  assert.ok(s.startsWith('<|im_start|>system\nTools: calc, search<|im_end|>\n'), s);
  assert.throws(
    () => tok.applyChatTemplate([], { templateName: 'nope' }),
    /no chat template 'nope'/,
  );
});

test('chat_template.jinja beside tokenizer.json takes precedence', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rtjob-tok-'));
  try {
    copyFileSync(join(bpeDir, 'tokenizer.json'), join(dir, 'tokenizer.json'));
    writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ eos_token: '<|im_end|>' }));
    writeFileSync(
      join(dir, 'chat_template.jinja'),
      '{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}',
    );
    const tok = loadTokenizer(dir);
    assert.is(tok.applyChatTemplate([{ role: 'user', content: 'hi' }]), '[user]hi[assistant]');
    assert.is(
      tok.applyChatTemplate([{ role: 'user', content: 'hi' }], { addGenerationPrompt: false }),
      '[user]hi',
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.run();
