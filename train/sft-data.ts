/**
 * What `train_sft` trains on and how it measures: conversations tokenised with the loss on the
 * assistant's turns, from a built-in dataset or a dataset file or directory (`data/read.ts`), and the greedy held-out accuracy on
 * the arithmetic task through any engine.
 *
 * @module
 */
import { seededRandom } from '../model/sampling.ts';
import type { ChatMessage, ChatTokenizer } from '../model/tokenizer.ts';
import type { InferenceEngine } from '../engines/types.ts';
import { arithReward, builtinDataset, type ArithRecord } from './data/arith.ts';
import { DatasetError } from './data/errors.ts';
import { readRecords } from './data/read.ts';
import { FlagError } from './driver-flags.ts';

/** A tokenised conversation and its loss mask. */
export interface Example {
  ids: number[];
  mask: number[];
}

/**
 * Tokenises a conversation; the loss mask is 1 on assistant turns (including their end token).
 * `tools` (OpenAI function-tool definitions) reach the chat template as `tools`, as at inference.
 */
export function encodeConversation(
  tok: ChatTokenizer,
  messages: ChatMessage[],
  tools?: unknown[],
): Example {
  const t = tools ? { tools } : {};
  const ids = tok.encode(tok.applyChatTemplate(messages, { addGenerationPrompt: false, ...t }));
  const mask = new Array<number>(ids.length).fill(0);
  messages.forEach((m, i) => {
    if (m.role !== 'assistant') return;
    const start = tok.encode(
      tok.applyChatTemplate(messages.slice(0, i), { addGenerationPrompt: true, ...t }),
    ).length;
    const end = tok.encode(
      tok.applyChatTemplate(messages.slice(0, i + 1), { addGenerationPrompt: false, ...t }),
    ).length;
    for (let t = start; t < Math.min(end, ids.length); t++) mask[t] = 1;
  });
  return { ids, mask };
}

/** A conversation `train_sft` trains on. */
export interface SftConversation {
  messages: ChatMessage[];
  tools?: unknown[];
}

/**
 * The conversations `train_sft` trains on: a built-in dataset (with `directFraction` of its records
 * answered directly, chosen per record from `seed`) or a dataset file or directory of any format
 * `readRecords` reads (`{messages, tools?}` or `{prompt, response}` per record; messages may carry
 * `tool_calls`, and `tool` turns are context). Flag errors throw at once; the records are read
 * when the promise runs.
 */
export function sftConversations(
  dataset: string,
  size: number,
  directFraction = 0,
  seed = 42,
  split = 'train',
): Promise<SftConversation[]> {
  if (!(directFraction >= 0 && directFraction <= 1))
    throw new FlagError(
      '--direct-fraction',
      `train_sft: --direct-fraction must be in [0, 1], got ${directFraction}`,
    );
  const builtin = builtinDataset(dataset, { size });
  if (builtin) {
    const r = seededRandom(seed * 31 + 17);
    return Promise.resolve(
      builtin.map((rec) => {
        const content = r() < directFraction ? rec.direct : rec.response;
        return {
          messages: [
            { role: 'user', content: rec.prompt },
            { role: 'assistant', content },
          ],
        };
      }),
    );
  }
  if (directFraction)
    throw new FlagError(
      '--direct-fraction',
      'train_sft: --direct-fraction applies to built-in datasets only',
    );
  return fileConversations(dataset, split);
}

async function fileConversations(dataset: string, split: string): Promise<SftConversation[]> {
  const out: SftConversation[] = [];
  try {
    for await (const o of readRecords(dataset, { split }))
      out.push(conversation(o, dataset, out.length + 1));
  } catch (err) {
    if (err instanceof DatasetError) throw new FlagError('--dataset', `train_sft: ${err.message}`);
    throw err;
  }
  return out;
}

/** Record `n` of `dataset` as a conversation. */
function conversation(o: Record<string, unknown>, dataset: string, n: number): SftConversation {
  if (o['tools'] !== undefined && !Array.isArray(o['tools']))
    throw new FlagError('--dataset', `${dataset}:${n}: 'tools' must be a list`);
  if (Array.isArray(o['messages']))
    return {
      messages: o['messages'] as ChatMessage[],
      ...(o['tools'] ? { tools: o['tools'] as unknown[] } : {}),
    };
  if (typeof o['prompt'] === 'string' && typeof o['response'] === 'string') {
    return {
      messages: [
        { role: 'user', content: o['prompt'] },
        { role: 'assistant', content: o['response'] },
      ],
    };
  }
  throw new FlagError(
    '--dataset',
    `${dataset}:${n}: need 'messages' or 'prompt' and 'response' (fields: ${Object.keys(o).join(', ')})`,
  );
}

/** One evaluation by {@link evalArith}: the accuracy and every answer. */
export interface ArithEval {
  accuracy: number;
  samples: { prompt: string; kind: string; output: string; reward: number }[];
}

/**
 * Accuracy of `engine` on built-in records (answers parsed from `The answer is N`), one answer per
 * record: greedy unless `greedy: false` (then sampled at `temperature`, default 1).
 */
export async function evalArith(
  engine: InferenceEngine,
  tok: ChatTokenizer,
  records: ArithRecord[],
  opts: { greedy?: boolean; temperature?: number; maxNewTokens?: number } = {},
): Promise<ArithEval> {
  const gconfig = {
    greedy: opts.greedy ?? true,
    temperature: opts.temperature ?? 1,
    maxNewTokens: opts.maxNewTokens ?? 48,
  };
  const outs = await Promise.all(
    records.map((r) =>
      engine.generate({
        inputIds: tok.encode(tok.applyChatTemplate([{ role: 'user', content: r.prompt }])),
        gconfig,
      }),
    ),
  );
  const samples = outs.map((o, i) => {
    const output = tok.decode(o.outputTokens, { skipSpecialTokens: true });
    return {
      prompt: records[i]!.prompt,
      kind: records[i]!.kind,
      output,
      reward: arithReward(output, records[i]!.solution),
    };
  });
  return {
    accuracy: samples.reduce((s, x) => s + x.reward, 0) / Math.max(1, samples.length),
    samples,
  };
}
