/**
 * The built-in model's tokenizer: one token per printable ASCII character plus newline, and five
 * special tokens, written as an ordinary HF `tokenizer.json` (a BPE model without merges, so
 * every character is a token) so it loads through the same code path as any HF tokenizer. The
 * chat template keeps prompts short: `<|user|>question<|assistant|>answer<|end|>`.
 *
 * @module
 */

/** Special tokens, ids 0..4. */
export const builtinSpecialTokens = [
  '<|pad|>',
  '<|end|>',
  '<|user|>',
  '<|assistant|>',
  '<|system|>',
] as const;

/** The chat template of the built-in tokenizer (Jinja). */
export const builtinChatTemplate =
  "{% for m in messages %}{% if m['role'] == 'system' %}<|system|>{{ m['content'] }}" +
  "{% elif m['role'] == 'user' %}<|user|>{{ m['content'] }}" +
  "{% elif m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}<|end|>" +
  "{% else %}<|user|>{{ m['content'] }}{% endif %}{% endfor %}" +
  '{% if add_generation_prompt %}<|assistant|>{% endif %}';

/** `tokenizer.json` and `tokenizer_config.json` contents of the built-in tokenizer. */
export function builtinTokenizerFiles(): {
  tokenizerJson: object;
  tokenizerConfig: Record<string, unknown>;
} {
  const vocab: Record<string, number> = {};
  builtinSpecialTokens.forEach((s, i) => (vocab[s] = i));
  let id = builtinSpecialTokens.length;
  for (let c = 32; c < 127; c++) vocab[String.fromCharCode(c)] = id++;
  vocab['\n'] = id;
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: builtinSpecialTokens.map((content, i) => ({
      id: i,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: { type: 'Fuse' },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  };
  const tokenizerConfig = {
    tokenizer_class: 'PreTrainedTokenizerFast',
    model_max_length: 256,
    bos_token: null,
    eos_token: '<|end|>',
    pad_token: '<|pad|>',
    chat_template: builtinChatTemplate,
    added_tokens_decoder: Object.fromEntries(
      builtinSpecialTokens.map((content, i) => [
        String(i),
        {
          content,
          special: true,
          normalized: false,
          lstrip: false,
          rstrip: false,
          single_word: false,
        },
      ]),
    ),
  };
  return { tokenizerJson, tokenizerConfig };
}

/** Vocabulary size of the built-in tokenizer (5 special + 95 printable ASCII + newline). */
export const builtinVocabSize = builtinSpecialTokens.length + 95 + 1;

/**
 * `config.json` of the built-in tiny model (≈0.4M parameters): 4 layers, hidden 96, 4 query heads
 * sharing 2 key/value heads, SwiGLU 256, tied embeddings.
 */
export function tinyMathConfig(): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    vocab_size: builtinVocabSize,
    hidden_size: 96,
    intermediate_size: 256,
    num_hidden_layers: 4,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 24,
    max_position_embeddings: 256,
    rms_norm_eps: 1e-5,
    rope_theta: 10000,
    tie_word_embeddings: true,
    attention_bias: false,
    hidden_act: 'silu',
    bos_token_id: null,
    eos_token_id: 1,
    pad_token_id: 0,
    torch_dtype: 'float32',
  };
}
