/**
 * The tokenizer keys of a GGUF, from an HF tokenizer (`tokenizer.json`, `tokenizer_config.json`,
 * `chat_template.jinja`): every token string by id, its type, the BPE merges, the special ids and
 * the chat template, so llama.cpp (and programs that read GGUF, such as `llama-server`) can
 * tokenize and chat with the file. rtjob itself only sends and receives token ids.
 *
 * @module
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { LlamaConfig } from '../config.ts';
import type { GgufValue } from './format.ts';

/** llama.cpp's token types (`llama_token_type`). */
const tokenType = { normal: 1, control: 3, userDefined: 4, unused: 5 } as const;

interface TokenizerJson {
  model?: { type?: string; vocab?: Record<string, number>; merges?: (string | [string, string])[] };
  added_tokens?: { id: number; content: string; special?: boolean }[];
  pre_tokenizer?: unknown;
}

function readJson(path: string): Record<string, unknown> | undefined {
  return existsSync(path)
    ? (JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>)
    : undefined;
}

function chatTemplate(
  dir: string,
  tokConfig: Record<string, unknown> | undefined,
): string | undefined {
  const jinja = join(dir, 'chat_template.jinja');
  if (existsSync(jinja)) return readFileSync(jinja, 'utf8');
  const t = tokConfig?.chat_template;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) {
    const named = t as { name: string; template: string }[];
    return (named.find((x) => x.name === 'default') ?? named[0])?.template;
  }
  return undefined;
}

/**
 * llama.cpp's pre-tokenizer name for this model: `qwen2` for the Qwen families, `llama-bpe` for a
 * Llama 3 style split (digits in groups of up to three), else `default`.
 */
function preTokenizer(config: LlamaConfig, tok: TokenizerJson): string {
  if (config.model_type === 'qwen2' || config.model_type === 'qwen3') return 'qwen2';
  if (JSON.stringify(tok.pre_tokenizer ?? null).includes('\\\\p{N}{1,3}')) return 'llama-bpe';
  return 'default';
}

const first = (v: number | number[] | null): number | null =>
  Array.isArray(v) ? (v[0] ?? null) : v;

/**
 * The `tokenizer.*` metadata for a model with `config.vocab_size` ids. Ids the tokenizer does not
 * name (padding rows of the embedding) become unused `[PAD<id>]` tokens; without a tokenizer
 * directory every id is such a token, which is enough for id-level generation.
 */
export function tokenizerMetadata(config: LlamaConfig, dir?: string): [string, GgufValue][] {
  const V = config.vocab_size;
  const tokens: string[] = Array.from({ length: V }, (_, i) => `[PAD${i}]`);
  const types = new Int32Array(V).fill(tokenType.unused);
  const tok = (dir && (readJson(join(dir, 'tokenizer.json')) as TokenizerJson | undefined)) || {};
  const tokConfig = dir ? readJson(join(dir, 'tokenizer_config.json')) : undefined;
  for (const [s, id] of Object.entries(tok.model?.vocab ?? {})) {
    if (id < V) {
      tokens[id] = s;
      types[id] = tokenType.normal;
    }
  }
  for (const a of tok.added_tokens ?? []) {
    if (a.id < V) {
      tokens[a.id] = a.content;
      types[a.id] = a.special ? tokenType.control : tokenType.userDefined;
    }
  }
  const merges = (tok.model?.merges ?? []).map((m) => (Array.isArray(m) ? m.join(' ') : m));
  const out: [string, GgufValue][] = [
    ['tokenizer.ggml.model', { type: 'str', value: 'gpt2' }],
    ['tokenizer.ggml.pre', { type: 'str', value: preTokenizer(config, tok) }],
    ['tokenizer.ggml.tokens', { type: 'str[]', value: tokens }],
    ['tokenizer.ggml.token_type', { type: 'i32[]', value: types }],
    ['tokenizer.ggml.merges', { type: 'str[]', value: merges }],
  ];
  const ids: [string, number | null][] = [
    ['tokenizer.ggml.bos_token_id', config.bos_token_id],
    ['tokenizer.ggml.eos_token_id', first(config.eos_token_id)],
    ['tokenizer.ggml.padding_token_id', config.pad_token_id],
  ];
  for (const [k, id] of ids) if (id !== null && id < V) out.push([k, { type: 'u32', value: id }]);
  out.push([
    'tokenizer.ggml.add_bos_token',
    { type: 'bool', value: tokConfig?.add_bos_token === true },
  ]);
  const template = dir ? chatTemplate(dir, tokConfig) : undefined;
  if (template) out.push(['tokenizer.chat_template', { type: 'str', value: template }]);
  return out;
}
