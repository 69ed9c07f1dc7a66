/**
 * Qwen3's real tokenizer and chat template: encoding and decoding as HF does (ids checked against
 * published HF outputs), and the template rendered exactly as transformers' Jinja setup renders
 * it, with tools, tool calls, tool responses and enable_thinking (test/fixtures/model/qwen3-tokenizer).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { loadTokenizer, type ChatTokenizer } from '../../model/tokenizer.ts';
import { qwen3ChatCases, qwen3TokenizerDir } from '../fixtures/model/qwen3.ts';

let tok: ChatTokenizer;
test.before(() => {
  tok = loadTokenizer(qwen3TokenizerDir());
});

test('encodes as HF does: byte-level BPE ids, special tokens as single ids', () => {
  assert.equal(tok.encode('Hello, my dog is cute'), [9707, 11, 847, 5562, 374, 18838]);
  assert.equal(tok.encode('Hello world'), [9707, 1879]);
  assert.equal(tok.encode('<|im_start|>user\n'), [151644, 872, 198]);
  assert.equal(
    [
      tok.tokenToId('<|im_end|>'),
      tok.tokenToId('<|endoftext|>'),
      tok.tokenToId('<think>'),
      tok.tokenToId('<tool_call>'),
    ],
    [151645, 151643, 151667, 151657],
  );
  assert.is(tok.eosTokenId, 151645);
  assert.is(tok.padTokenId, 151643);
  // Digits are split one by one (\p{N} in the pre-tokenizer).
  assert.equal(
    tok.encode(' 2024').map((id) => tok.decode([id])),
    [' ', '2', '0', '2', '4'],
  );
});

test('decodes as HF does: exact round trips, NFC, emoji across byte tokens, no ids is empty', () => {
  for (const text of [
    'The answer is 85.',
    'café — naïve 日本語 🙂',
    '  spaces\n\ttabs\r\n',
    '<think>\nx\n</think>\n\n<tool_call>\n{"a": 1}\n</tool_call>',
  ]) {
    assert.is(tok.decode(tok.encode(text)), text);
  }
  assert.is(tok.decode(tok.encode('e\u0301')), 'é', 'NFC normalizer');
  assert.is(tok.decode([]), '');
  assert.is(
    tok.decode([151644, 872, 198, 9707, 151645], { skipSpecialTokens: true }),
    'user\nHello',
  );
});

for (const c of qwen3ChatCases()) {
  test(`chat template renders as HF's Jinja: ${c.name}`, () => {
    const out = tok.applyChatTemplate(c.messages, {
      tools: c.tools,
      addGenerationPrompt: c.add_generation_prompt,
      enableThinking: c.enable_thinking,
    });
    assert.is(out, c.expected);
    assert.is(tok.decode(tok.encode(out)), out);
  });
}

test.run();
