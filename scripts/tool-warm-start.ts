/**
 * The pieces of `npm run warm-start:tool` (scripts/warm-start-tool.sh) that are not `train_sft`:
 *
 * - `init --from DIR --out DIR`: the tool model's starting point. Copies the math warm start and
 *   extends its tokenizer with a tool role, the Hermes/Qwen `<tool_call>` tags and the pieces of
 *   the call's JSON as added tokens (a call is 17 tokens instead of 62 characters), writes the
 *   chat template that renders `tools`, assistant `tool_calls` and `tool` turns, and grows the
 *   (tied) embedding by the new rows.
 * - `data --out FILE`: the SFT conversations as JSONL (`{messages, tools}`), from the built-in
 *   `arith` train split: most answered directly, a `--tool-fraction` share through one
 *   calculator call (call → result → `The answer is N.`), so the model knows the format but
 *   rarely chooses it.
 *
 * @example
 * node --import tsx scripts/tool-warm-start.ts init --from model/pretrained/rtjob-tiny-math --out /tmp/base
 * node --import tsx scripts/tool-warm-start.ts data --out /tmp/tool-sft.jsonl --tool-fraction 0.2
 *
 * @module
 */
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Command } from 'commander';
import { seededRandom } from '../model/prng.ts';
import { parseSafetensors, serializeSafetensors } from '../model/safetensors.ts';
import { arithDataset, type ArithRecord } from '../train/data/arith.ts';

/** The calculator as the agent offers it (OpenAI function-tool shape); the template shows its name. */
export const calculatorTool = {
  type: 'function',
  function: {
    name: 'calculator',
    description: 'Evaluates an arithmetic expression with + - * / and parentheses.',
    parameters: {
      type: 'object',
      properties: { expression: { type: 'string', description: 'e.g. 47+38' } },
      required: ['expression'],
    },
  },
} as const;

/**
 * Tokens added to the character vocabulary. `<|tool|>` opens a tool result (special, like the
 * other role markers). The call tags and JSON pieces are ordinary (non-special) added tokens, so
 * decoding keeps them and a tool-call parser sees `<tool_call>{"name": ...}</tool_call>`.
 */
export const addedTokens: { content: string; special: boolean }[] = [
  { content: '<|tool|>', special: true },
  ...[
    '<tool_call>',
    '</tool_call>',
    '{"',
    '": "',
    '", "',
    '": {"',
    '"}}',
    'name',
    'arguments',
    'calculator',
    'expression',
  ].map((content) => ({ content, special: false })),
];

/**
 * The chat template (HF convention). `tools` become one short line, `<|system|>tools: calculator`.
 * An assistant turn is its content, then each call as
 * `<tool_call>{"name": "calculator", "arguments": {"expression": "47+38"}}</tool_call>` (arguments
 * given as an object are rendered with `tojson`, a string as it is), then `<|end|>`; a `tool`
 * message is `<|tool|>` and its content.
 */
export const toolChatTemplate = [
  '{%- if tools %}<|system|>tools: {% for t in tools %}',
  '{%- if t.function is defined %}{{ t.function.name }}{% else %}{{ t.name }}{% endif %}',
  '{%- if not loop.last %}, {% endif %}{% endfor %}{% endif %}',
  '{%- for m in messages %}',
  "{%- if m.role == 'system' %}<|system|>{{ m.content }}",
  "{%- elif m.role == 'user' %}<|user|>{{ m.content }}",
  "{%- elif m.role == 'assistant' %}<|assistant|>{% if m.content %}{{ m.content }}{% endif %}",
  '{%- for tc in m.tool_calls or [] %}',
  '{%- if tc.function is defined %}{% set f = tc.function %}{% else %}{% set f = tc %}{% endif %}',
  '<tool_call>{"name": "{{ f.name }}", "arguments": {% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}{{ \'}\' }}</tool_call>',
  '{%- endfor %}<|end|>',
  "{%- elif m.role == 'tool' %}<|tool|>{{ m.content }}",
  '{%- else %}<|user|>{{ m.content }}',
  '{%- endif %}',
  '{%- endfor %}',
  '{%- if add_generation_prompt %}<|assistant|>{% endif %}',
].join('\n');

/** Writes the tool model's starting directory: `from`'s weights and tokenizer, extended. */
export function initToolModel(from: string, out: string): void {
  mkdirSync(out, { recursive: true });
  const tokJson = JSON.parse(readFileSync(join(from, 'tokenizer.json'), 'utf8')) as {
    added_tokens: { id: number; content: string; special: boolean }[];
    model: { vocab: Record<string, number> };
  };
  const tokCfg = JSON.parse(readFileSync(join(from, 'tokenizer_config.json'), 'utf8')) as Record<
    string,
    unknown
  >;
  const config = JSON.parse(readFileSync(join(from, 'config.json'), 'utf8')) as {
    vocab_size: number;
    hidden_size: number;
  };
  const known = new Set([
    ...Object.keys(tokJson.model.vocab),
    ...tokJson.added_tokens.map((t) => t.content),
  ]);
  const decoder = (tokCfg.added_tokens_decoder ?? {}) as Record<string, unknown>;
  let id = config.vocab_size;
  for (const t of addedTokens) {
    if (known.has(t.content))
      throw new Error(`${from} already has the token ${t.content}; start from the math warm start`);
    const entry = {
      content: t.content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: t.special,
    };
    tokJson.added_tokens.push({ id, ...entry });
    decoder[String(id)] = entry;
    id++;
  }
  const vocabSize = id;
  delete tokCfg.chat_template;
  tokCfg.added_tokens_decoder = decoder;
  writeFileSync(join(out, 'tokenizer.json'), JSON.stringify(tokJson) + '\n');
  writeFileSync(join(out, 'tokenizer_config.json'), JSON.stringify(tokCfg, null, 2) + '\n');
  writeFileSync(join(out, 'chat_template.jinja'), toolChatTemplate + '\n');
  writeFileSync(
    join(out, 'config.json'),
    JSON.stringify({ ...config, vocab_size: vocabSize }, null, 2) + '\n',
  );
  copyFileSync(join(from, 'generation_config.json'), join(out, 'generation_config.json'));

  // A new token starts as the mean embedding of the characters it spells (a common init for added
  // tokens): distinct from the others at once, and near what the model already reads there.
  const { tensors } = parseSafetensors(readFileSync(join(from, 'model.safetensors')), from);
  const name = 'model.embed_tokens.weight';
  const emb = tensors[name];
  if (!emb || emb.shape[0] !== config.vocab_size)
    throw new Error(`${from}: no ${name} of ${config.vocab_size} rows`);
  const h = config.hidden_size;
  const grown = new Float32Array(vocabSize * h);
  grown.set(emb.data);
  addedTokens.forEach((t, k) => {
    const chars = [...t.content]
      .map((c) => tokJson.model.vocab[c])
      .filter((x): x is number => x !== undefined);
    const row = grown.subarray((config.vocab_size + k) * h, (config.vocab_size + k + 1) * h);
    for (const c of chars)
      for (let j = 0; j < h; j++) row[j]! += emb.data[c * h + j]! / chars.length;
  });
  tensors[name] = { shape: [vocabSize, h], data: grown };
  writeFileSync(join(out, 'model.safetensors'), serializeSafetensors(tensors));
}

/**
 * The calculator expression of a record: its first equation's left side, later steps folded in
 * (`12+5=17`, `17-3=14` → `12+5-3`), so every problem takes one call.
 */
export function expressionOf(rec: ArithRecord): string {
  const steps = rec.solution.split('\n').filter((l) => l.includes('='));
  let expr = '';
  let prev = '';
  for (const s of steps) {
    const [lhs = '', rhs = ''] = s.split('=');
    expr = expr && lhs.startsWith(prev) ? expr + lhs.slice(prev.length) : lhs;
    prev = rhs;
  }
  return expr;
}

/** One SFT conversation: a direct answer, or a calculator call, its result and the answer. */
export function toolConversation(
  rec: ArithRecord,
  useTool: boolean,
): { messages: object[]; tools: object[] } {
  const user = { role: 'user', content: rec.prompt };
  if (!useTool)
    return {
      messages: [user, { role: 'assistant', content: rec.direct }],
      tools: [calculatorTool],
    };
  const call = {
    type: 'function',
    function: { name: 'calculator', arguments: { expression: expressionOf(rec) } },
  };
  return {
    messages: [
      user,
      { role: 'assistant', content: '', tool_calls: [call] },
      { role: 'tool', content: rec.answer },
      { role: 'assistant', content: rec.direct },
    ],
    tools: [calculatorTool],
  };
}

/** Writes `size` SFT conversations as JSONL; a `toolFraction` share (drawn per record) uses the tool. */
export function writeToolData(
  out: string,
  size: number,
  toolFraction: number,
  seed: number,
): { tool: number; total: number } {
  if (!(toolFraction >= 0 && toolFraction <= 1))
    throw new Error(`--tool-fraction must be in [0, 1], got ${toolFraction}`);
  const r = seededRandom(seed);
  let tool = 0;
  const lines = arithDataset({ split: 'train', size }).map((rec) => {
    const useTool = r() < toolFraction;
    if (useTool) tool++;
    return JSON.stringify(toolConversation(rec, useTool));
  });
  writeFileSync(out, lines.join('\n') + '\n');
  return { tool, total: lines.length };
}

/** Parses the subcommand and runs it. */
export function main(argv: string[]): void {
  const cmd = new Command('tool-warm-start');
  cmd
    .command('init')
    .description('extend the math warm start with tool tokens and the tool chat template')
    .requiredOption('--from <dir>', 'the math warm start')
    .requiredOption('--out <dir>', 'where the extended model goes')
    .action((o: { from: string; out: string }) => {
      initToolModel(resolve(o.from), resolve(o.out));
      console.log(`tool model base written to ${o.out}`);
    });
  cmd
    .command('data')
    .description('write the SFT conversations (JSONL)')
    .requiredOption('--out <file>', 'JSONL file')
    .option('--size <n>', 'conversations', Number, 20000)
    .option('--tool-fraction <x>', 'share answered through a calculator call', Number, 0.2)
    .option('--seed <n>', 'seed of the per-record choice', Number, 11)
    .action((o: { out: string; size: number; toolFraction: number; seed: number }) => {
      const n = writeToolData(resolve(o.out), o.size, o.toolFraction, o.seed);
      console.log(`${n.total} conversations (${n.tool} with a tool call) written to ${o.out}`);
    });
  cmd.parse(argv, { from: 'user' });
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  try {
    main(process.argv.slice(2));
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  }
}
