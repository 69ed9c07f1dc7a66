/**
 * Tokenizers and chat templates, offline: any HF `tokenizer.json` through
 * `@huggingface/tokenizers`, chat templates through `@huggingface/jinja`. The template may be a
 * string in `tokenizer_config.json`, a list of named templates there, or a `chat_template.jinja`
 * file beside it.
 *
 * @module
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { ModelError } from './errors.ts';

/** A tool call of an assistant message, in the OpenAI / HF chat-template shape. */
export interface ChatToolCall {
  type?: 'function';
  id?: string;
  function: { name: string; arguments: string | Record<string, unknown> };
}

/** A chat message as HF chat templates expect it. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool' | string;
  content: string;
  /** Assistant tool calls (rendered by templates that know tools, e.g. Qwen3's `<tool_call>`). */
  tool_calls?: ChatToolCall[];
  /** Assistant reasoning kept apart from `content` (Qwen3's `<think>` block). */
  reasoning_content?: string;
  /** Tool messages: the call answered and the tool's name. */
  tool_call_id?: string;
  name?: string;
}

/** Options of {@link ChatTokenizer.applyChatTemplate}. */
export interface ChatTemplateOptions {
  /** Append the assistant header so the model continues as the assistant. @default true */
  addGenerationPrompt?: boolean;
  /** Which named template (when the config has a list). @default 'default' */
  templateName?: string;
  /**
   * Tool definitions passed to the template as `tools`, as HF's `apply_chat_template(tools=...)`
   * takes them: JSON schemas, usually `{ type: 'function', function: { name, description,
   * parameters } }`.
   */
  tools?: unknown[];
  /**
   * `enable_thinking` for templates that read it (Qwen3: `false` closes an empty `<think>`
   * block after the generation prompt). Unset leaves it undefined, as HF does.
   */
  enableThinking?: boolean;
  /** Extra variables for the template. */
  extra?: Record<string, unknown>;
}

type TemplateSpec = string | { name: string; template: string }[];

function tokenString(t: unknown): string | undefined {
  if (typeof t === 'string') return t;
  if (t && typeof t === 'object' && 'content' in t)
    return String((t as { content: unknown }).content);
  return undefined;
}

/**
 * A tokenizer plus its chat template(s) and special token ids.
 *
 * @example
 * const tok = loadTokenizer('model/pretrained/rtjob-tiny-math');
 * const ids = tok.encode(tok.applyChatTemplate([{ role: 'user', content: 'What is 2+3?' }]));
 */
export class ChatTokenizer {
  readonly tokenizer: Tokenizer;
  readonly config: Record<string, unknown>;
  readonly eosToken: string | undefined;
  readonly bosToken: string | undefined;
  readonly padToken: string | undefined;
  private readonly templates = new Map<string, Template>();

  constructor(
    tokenizerJson: object,
    tokenizerConfig: Record<string, unknown>,
    chatTemplate?: TemplateSpec,
  ) {
    this.config = tokenizerConfig;
    this.tokenizer = new Tokenizer(tokenizerJson as never, tokenizerConfig as never);
    this.eosToken = tokenString(tokenizerConfig.eos_token);
    this.bosToken = tokenString(tokenizerConfig.bos_token);
    this.padToken = tokenString(tokenizerConfig.pad_token);
    const spec = chatTemplate ?? (tokenizerConfig.chat_template as TemplateSpec | undefined);
    if (typeof spec === 'string') this.templates.set('default', new Template(spec));
    else if (Array.isArray(spec))
      for (const t of spec) this.templates.set(t.name, new Template(t.template));
  }

  /** Number of ids (including added tokens). */
  get vocabSize(): number {
    let max = -1;
    for (const id of this.tokenizer.get_vocab().values()) if (id > max) max = id;
    return max + 1;
  }

  /** The id of a token string, or undefined. */
  tokenToId(token: string): number | undefined {
    return this.tokenizer.token_to_id(token) ?? undefined;
  }

  get eosTokenId(): number | undefined {
    return this.eosToken === undefined ? undefined : this.tokenToId(this.eosToken);
  }

  get padTokenId(): number | undefined {
    return this.padToken === undefined ? this.eosTokenId : this.tokenToId(this.padToken);
  }

  /** Token ids of `text`; special tokens written in the text are recognised. */
  encode(text: string, opts: { addSpecialTokens?: boolean } = {}): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: opts.addSpecialTokens ?? false }).ids;
  }

  /** Text of `ids`; no ids is the empty string, as in HF. */
  decode(ids: number[], opts: { skipSpecialTokens?: boolean } = {}): string {
    if (ids.length === 0) return '';
    return this.tokenizer.decode(ids, { skip_special_tokens: opts.skipSpecialTokens ?? false });
  }

  /** Names of the chat templates this tokenizer has. */
  get templateNames(): string[] {
    return [...this.templates.keys()];
  }

  /**
   * Renders `messages` with the chat template (no tokenisation), with the variables HF's
   * `apply_chat_template` passes: `messages`, `tools`, `add_generation_prompt`, the special
   * tokens, and any extra ones.
   */
  applyChatTemplate(messages: ChatMessage[], opts: ChatTemplateOptions = {}): string {
    const name = opts.templateName ?? 'default';
    const template =
      this.templates.get(name) ??
      (opts.templateName ? undefined : this.templates.values().next().value);
    if (!template)
      throw new ModelError(
        'MODEL_CHECKPOINT',
        `tokenizer has no chat template '${name}' (has: ${this.templateNames.join(', ') || 'none'})`,
      );
    return template.render({
      messages,
      add_generation_prompt: opts.addGenerationPrompt ?? true,
      bos_token: this.bosToken ?? '',
      eos_token: this.eosToken ?? '',
      pad_token: this.padToken ?? '',
      unk_token: tokenString(this.config.unk_token) ?? '',
      tools: opts.tools,
      ...(opts.enableThinking === undefined ? {} : { enable_thinking: opts.enableThinking }),
      ...opts.extra,
    });
  }
}

/** Loads `tokenizer.json`, `tokenizer_config.json` and, when present, `chat_template.jinja`. */
export function loadTokenizer(dir: string): ChatTokenizer {
  const tokPath = join(dir, 'tokenizer.json');
  if (!existsSync(tokPath))
    throw new ModelError('MODEL_FILE_MISSING', `no tokenizer.json in ${dir}`);
  const json = JSON.parse(readFileSync(tokPath, 'utf8'));
  const cfgPath = join(dir, 'tokenizer_config.json');
  const cfg = existsSync(cfgPath)
    ? (JSON.parse(readFileSync(cfgPath, 'utf8')) as Record<string, unknown>)
    : {};
  const jinjaPath = join(dir, 'chat_template.jinja');
  const template = existsSync(jinjaPath) ? readFileSync(jinjaPath, 'utf8') : undefined;
  return new ChatTokenizer(json, cfg, template);
}
