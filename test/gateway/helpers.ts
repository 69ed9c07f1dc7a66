/**
 * Shared pieces of the gateway tests: chat templates in the HF tools convention (a compact one
 * like the shipped tool model's, a Qwen-style one with a newline after each end token, one that
 * drops earlier reasoning), the built-in char-level tokenizer with any of them, a scripted
 * engine that answers with chosen text so tool calls are deterministic, the `add(2, 3)` tool
 * model most client tests talk to, a gateway per suite, and an `openai` client on a session.
 */
import OpenAI from 'openai';
import type { Test } from 'uvu';

import type { Sample } from '../../agents/types.ts';
import { SimulatedEngine } from '../../engines/simulated/simulated-engine.ts';
import type { GenerateRequest } from '../../engines/types.ts';
import { Gateway, type GatewayOptions } from '../../gateway/server.ts';
import { builtinTokenizerFiles } from '../../model/builtin.ts';
import { ChatTokenizer } from '../../model/tokenizer.ts';

/** Compact Hermes-style template: tools in the system turn, calls as `<tool_call>{json}</tool_call>`. */
export const compactToolTemplate = [
  '{%- if tools %}<|system|>Tools:{% for t in tools %} {{ t.function.name }}{% endfor %}{% endif %}',
  '{%- for m in messages %}',
  "{%- if m.role == 'system' %}<|system|>{{ m.content }}",
  "{%- elif m.role == 'user' %}<|user|>{{ m.content }}",
  "{%- elif m.role == 'assistant' %}<|assistant|>{{ m.content }}",
  '{%- if m.tool_calls %}{% for tc in m.tool_calls %}{% set f = tc.function if tc.function is defined else tc %}',
  '<tool_call>{"name": "{{ f.name }}", "arguments": {{ f.arguments | tojson }}}</tool_call>{% endfor %}{% endif %}<|end|>',
  "{%- elif m.role == 'tool' %}<|user|><tool_response>{{ m.content }}</tool_response>",
  '{%- endif %}{%- endfor %}',
  '{%- if add_generation_prompt %}<|assistant|>{% endif %}',
].join('');

/**
 * Written after Qwen 2.5's structure (tools listed in `<tools>` in the system turn, calls in
 * `<tool_call>` blocks on their own lines, consecutive tool results in one user turn as
 * `<tool_response>` blocks), with the built-in tokenizer's special tokens; every turn ends with the
 * end token and a newline, so each next prompt has a newline after the model's EOS.
 */
export const qwenStyleTemplate = `{%- if tools %}
<|system|>{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|end|>
{% elif messages[0].role == 'system' %}<|system|>{{ messages[0].content }}<|end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}<|user|>{{ message.content }}<|end|>
{% elif message.role == 'assistant' %}<|assistant|>{{ message.content }}
{%- if message.tool_calls %}{% for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{% set tool_call = tool_call.function %}{% endif %}
{%- if message.content or not loop.first %}
{% endif %}<tool_call>
{"name": "{{ tool_call.name }}", "arguments": {{ tool_call.arguments | tojson }}}
</tool_call>
{%- endfor %}{% endif %}<|end|>
{% elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|user|>{% endif %}
<tool_response>
{{ message.content }}
</tool_response>
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|end|>
{% endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}`;

/**
 * Drops the `<think>...</think>` part of assistant turns that come before the last user message,
 * as reasoning-model templates do: a new user turn rewrites history.
 */
export const historyEditingTemplate = [
  '{%- set ns = namespace(last_user=0) %}',
  "{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}",
  '{%- for m in messages %}',
  "{%- if m.role == 'user' %}<|user|>{{ m.content }}",
  "{%- elif m.role == 'assistant' %}<|assistant|>",
  "{%- if loop.index0 < ns.last_user and '</think>' in m.content %}{{ m.content.split('</think>')[1] }}",
  '{%- else %}{{ m.content }}{% endif %}<|end|>',
  '{%- endif %}{%- endfor %}',
  '{%- if add_generation_prompt %}<|assistant|>{% endif %}',
].join('');

/** The built-in char-level tokenizer (eos `<|end|>`) with `template` as its chat template. */
export function tokenizerWith(template: string): ChatTokenizer {
  const { tokenizerJson, tokenizerConfig } = builtinTokenizerFiles();
  return new ChatTokenizer(tokenizerJson, { ...tokenizerConfig, chat_template: template });
}

/**
 * An engine that answers each prompt with `reply(promptText)` followed by the end token, or cut
 * just after the first of the request's stop strings, as engines stop.
 */
export function scriptedEngine(
  tok: ChatTokenizer,
  reply: (prompt: string, req: GenerateRequest) => string,
  o: { eos?: boolean; logprob?: number } = {},
): SimulatedEngine {
  return new SimulatedEngine({
    logprob: o.logprob ?? -0.25,
    respond: (ids, req) => {
      const text = reply(tok.decode(ids, { skipSpecialTokens: false }), req);
      const cuts = (req.gconfig?.stop ?? [])
        .filter((s) => text.includes(s))
        .map((s) => text.indexOf(s) + s.length);
      if (cuts.length) return tok.encode(text.slice(0, Math.min(...cuts)));
      return [...tok.encode(text), ...(o.eos === false ? [] : [tok.eosTokenId!])];
    },
  });
}

/**
 * The tool model of the client tests, on `tok`: it calls `add(2, 3)` in the compact template's
 * spelling and, once the tool's result ends the prompt, answers `answer(result)` (default
 * `The answer is <result>.`). `reply` answers the prompts a suite adds (a stop word, a chat-only
 * turn) where it returns text. Every prompt and request is recorded, in order.
 */
export function addToolModel(
  tok: ChatTokenizer,
  o: {
    answer?: (result: string) => string;
    reply?: (prompt: string, req: GenerateRequest) => string | undefined;
  } = {},
): { engine: SimulatedEngine; prompts: string[]; requests: GenerateRequest[] } {
  const prompts: string[] = [];
  const requests: GenerateRequest[] = [];
  const engine = scriptedEngine(tok, (prompt, req) => {
    prompts.push(prompt);
    requests.push(req);
    const result = /<tool_response>([^<]*)<\/tool_response><\|assistant\|>$/.exec(prompt)?.[1];
    if (result !== undefined) return o.answer?.(result) ?? `The answer is ${result}.`;
    return o.reply?.(prompt, req) ?? hermesCall('add', { a: 2, b: 3 });
  });
  return { engine, prompts, requests };
}

/** A gateway on loopback with test defaults. */
export function startGateway(
  o: Partial<GatewayOptions> & Pick<GatewayOptions, 'engine' | 'tokenizer'>,
): Promise<Gateway> {
  return Gateway.start({ model: 'tiny', contextLength: 4096, maxNewTokens: 512, ...o });
}

/**
 * A gateway for a whole uvu suite: started (with {@link startGateway}'s defaults) before its
 * first test, closed after its last. Read `gw` inside tests.
 */
export function suiteGateway(
  suite: Test,
  o: Partial<GatewayOptions> & Pick<GatewayOptions, 'engine' | 'tokenizer'>,
): { readonly gw: Gateway } {
  let gw: Gateway | undefined;
  suite.before(async () => {
    gw = await startGateway(o);
  });
  suite.after(() => gw?.close());
  return {
    get gw(): Gateway {
      if (!gw) throw new Error('the suite gateway starts in the suite’s before hook');
      return gw;
    },
  };
}

/** The `openai` client an agent builds on a session's key: no retries, so a failure shows once. */
export function openaiClient(gw: { baseURL: string }, apiKey: string): OpenAI {
  return new OpenAI({ baseURL: gw.baseURL, apiKey, maxRetries: 0 });
}

/** A tool call in the compact template's spelling (Python-style JSON spacing, as `tojson` writes it). */
export function hermesCall(name: string, args: Record<string, unknown>): string {
  const json = (v: unknown): string =>
    JSON.stringify(v, null, 1)
      .replace(/\n\s*/g, ' ')
      .replace(/\[ /g, '[')
      .replace(/ \]/g, ']')
      .replace(/{ /g, '{')
      .replace(/ }/g, '}');
  return `<tool_call>{"name": "${name}", "arguments": ${json(args)}}</tool_call>`;
}

/** One sample asking the tool model's question ("What is 2+3?"), for a single episode. */
export function addSample(): Sample {
  return {
    index: 0,
    prompt: 'What is 2+3?',
    promptIds: [],
    nSamples: 1,
    groupId: 'g0',
    record: {},
  };
}
