/**
 * `train_rm`: trains a reward model, the causal LM with a scalar value head whose value at a
 * conversation's last token is its score, on chosen/rejected pairs with the pairwise
 * Bradley–Terry loss (`algorithms/reward-model-loss.ts`), as OpenRLHF's `train_rm`. Data: a JSONL
 * file of `{prompt, chosen, rejected}` records, or the built-in `arith` preference set (the worked
 * answer against the same answer with a wrong result). Writes an HF directory with
 * `value_head.weight` beside the LM weights (`loadModel(dir, { valueHead: true })` reads it) and
 * reports pairwise accuracy on held-out pairs before and after.
 *
 * @example
 * node --import tsx train/rm.ts --pretrain model/pretrained/rtjob-tiny --save-path /tmp/rm
 *
 * @module
 */
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { initBackend, tf } from '../model/backend.ts';
import { loadModel, saveModel } from '../model/checkpoint.ts';
import type { CausalLM } from '../model/llama.ts';
import { seededRandom } from '../model/sampling.ts';
import type { ChatTokenizer } from '../model/tokenizer.ts';
import { ModelTrainer } from '../model/training.ts';
import { forwardLogprobs } from '../model/sequence-logprobs.ts';
import { bradleyTerryLoss, pairwiseAccuracy } from '../algorithms/reward-model-loss.ts';
import { shuffle } from '../algorithms/shuffle.ts';
import { sequenceScores } from '../roles/reward-model.ts';
import { resolveCheckpointFlags } from './checkpoint-flags.ts';
import { builtinDataset } from './data/arith.ts';
import { DatasetError } from './data/errors.ts';
import { readRecords } from './data/read.ts';
import { flagParser, FlagError, runIfMain } from './driver-flags.ts';
import { defaultPretrain } from './ppo/main.ts';

/** One preference: the same prompt answered two ways. */
export interface PreferencePair {
  prompt: string;
  chosen: string;
  rejected: string;
}

/** Options of {@link trainRm}. */
export interface RmOptions {
  /** HF model directory to start from; the value head starts at zero. @default the shipped warm start */
  pretrain?: string;
  /** Where the reward model's HF directory goes. */
  savePath: string;
  /** `arith` (built-in pairs) or a JSONL file of `{prompt, chosen, rejected}`. @default 'arith' */
  dataset?: string;
  /** Built-in training pairs. @default 2000 */
  datasetSize?: number;
  /** Held-out pairs for the accuracy: the built-in test split, or a file's last pairs. @default 200; a tenth of a file */
  evalSize?: number;
  /** Pairs per optimizer step. @default 32 */
  batchSize?: number;
  /** Pairs per forward/backward. @default 16 */
  microBatchSize?: number;
  /** Peak learning rate (cosine decay). @default 1e-3 */
  lr?: number;
  /** Optimizer steps. @default 60 */
  maxSteps?: number;
  /** Bradley–Terry margin m: the chosen score should lead by m. @default 0 */
  margin?: number;
  /** @default 42 */
  seed?: number;
  /** @default true */
  verbose?: boolean;
}

/** What {@link trainRm} reports. */
export interface RmResult {
  steps: number;
  finalLoss: number;
  /** Held-out pairwise accuracy before and after training. */
  evalAccuracyBefore: number;
  evalAccuracy: number;
  /**
   * The starting LM's own preference on the held-out pairs: how often it gives the chosen answer
   * the higher log-likelihood. What the backbone already knows, for comparison with the head's.
   */
  lmAccuracy: number;
}

/**
 * The built-in preference set: an arithmetic prompt, its worked answer (chosen), and the same
 * answer with the result changed by a small wrong amount (rejected), so only the arithmetic tells
 * them apart.
 */
export function arithPreferencePairs(name: string, size: number, seed: number): PreferencePair[] {
  const records = builtinDataset(name, { size }) ?? [];
  const r = seededRandom(seed * 13 + 5);
  const deltas = [1, -1, 2, -2, 10, -10];
  return records.flatMap((rec) => {
    const wrong = String(Number(rec.answer) + deltas[Math.floor(r() * deltas.length)]!);
    // The result after `=` and after `is `, never a digit run inside an operand.
    const pattern = new RegExp(
      `(=\\s*|is )${rec.answer.replace(/[.]/g, '\\.')}(?!\\d|\\.\\d)`,
      'g',
    );
    const rejected = rec.response.replace(pattern, `$1${wrong}`);
    return rejected === rec.response
      ? []
      : [{ prompt: rec.prompt, chosen: rec.response, rejected }];
  });
}

/**
 * The pairs of a dataset file or directory (any format `readRecords` reads, its train split); a
 * bad record fails naming its number and the fields it has.
 */
async function readPairs(path: string): Promise<PreferencePair[]> {
  const out: PreferencePair[] = [];
  try {
    for await (const p of readRecords(path)) {
      if (![p['prompt'], p['chosen'], p['rejected']].every((x) => typeof x === 'string'))
        throw new FlagError(
          '--dataset',
          `train_rm: ${path} record ${out.length + 1} needs string prompt, chosen and rejected (fields: ${Object.keys(p).join(', ')})`,
        );
      out.push(p as unknown as PreferencePair);
    }
  } catch (err) {
    if (err instanceof DatasetError) throw new FlagError('--dataset', `train_rm: ${err.message}`);
    throw err;
  }
  return out;
}

/** The token ids of a prompt answered by `response`, in the chat template. */
export function encodeAnswer(tok: ChatTokenizer, prompt: string, response: string): number[] {
  return tok.encode(
    tok.applyChatTemplate(
      [
        { role: 'user', content: prompt },
        { role: 'assistant', content: response },
      ],
      { addGenerationPrompt: false },
    ),
  );
}

async function accuracy(model: CausalLM, pairs: number[][][], micro: number): Promise<number> {
  const c: number[] = [];
  const r: number[] = [];
  for (let i = 0; i < pairs.length; i += micro) {
    const mb = pairs.slice(i, i + micro);
    const t = sequenceScores(
      model,
      mb.flatMap((p) => p),
      false,
    );
    const s = await t.data();
    t.dispose();
    mb.forEach((_, k) => (c.push(s[2 * k]!), r.push(s[2 * k + 1]!)));
  }
  return pairwiseAccuracy(c, r);
}

/** How often the LM's log-likelihood of the chosen sequence beats the rejected one's. */
async function likelihoodAccuracy(
  model: CausalLM,
  pairs: number[][][],
  micro: number,
): Promise<number> {
  const total = (s: number[]): number => s.reduce((a, b) => a + b, 0);
  const lp = (
    await forwardLogprobs(
      model,
      pairs.flatMap((p) => p),
      { microBatchSize: 2 * micro },
    )
  ).logprobs.map(total);
  return pairwiseAccuracy(
    pairs.map((_, k) => lp[2 * k]!),
    pairs.map((_, k) => lp[2 * k + 1]!),
  );
}

/** Trains a reward model on preference pairs and saves it; see the module comment. */
export async function trainRm(o: RmOptions): Promise<RmResult> {
  const log = (s: string): void => {
    if (o.verbose !== false) console.log(s);
  };
  await initBackend();
  const seed = o.seed ?? 42;
  const pretrain = o.pretrain || defaultPretrain;
  const { model, tokenizer } = await loadModel(pretrain, { valueHead: true });
  if (!tokenizer) throw new FlagError('--pretrain', `train_rm: ${pretrain} has no tokenizer.json`);
  const dataset = o.dataset ?? 'arith';
  const builtin = builtinDataset(dataset, { size: 1 }) !== undefined;
  // A file's held-out pairs are its last `evalSize` (default a tenth).
  const file = builtin ? [] : await readPairs(dataset);
  const fileHeld = Math.min(o.evalSize ?? Math.floor(file.length / 10), file.length - 1);
  const train = builtin
    ? arithPreferencePairs(dataset, o.datasetSize ?? 2000, seed)
    : file.slice(0, file.length - fileHeld);
  const held = builtin
    ? arithPreferencePairs('arith:test', o.evalSize ?? 200, seed + 1)
    : file.slice(file.length - fileHeld);
  const enc = (ps: PreferencePair[]): number[][][] =>
    ps.map((p) => [
      encodeAnswer(tokenizer, p.prompt, p.chosen),
      encodeAnswer(tokenizer, p.prompt, p.rejected),
    ]);
  const trainIds = enc(train);
  const heldIds = enc(held);
  if (!trainIds.length) throw new FlagError('--dataset', 'train_rm: no preference pairs');
  const batchSize = o.batchSize ?? 32;
  const micro = Math.min(o.microBatchSize ?? 16, batchSize);
  const maxSteps = o.maxSteps ?? 60;
  const trainer = new ModelTrainer(model, {
    lr: o.lr ?? 1e-3,
    warmupSteps: Math.min(10, Math.floor(maxSteps / 10)),
    totalSteps: maxSteps,
    scheduler: 'cosine',
    weightDecay: 0,
    maxGradNorm: 1,
  });
  const before = heldIds.length ? await accuracy(model, heldIds, micro) : NaN;
  const lm = heldIds.length ? await likelihoodAccuracy(model, heldIds, micro) : NaN;
  log(
    `train_rm: ${model.numParameters} parameters, ${trainIds.length} pairs; held-out accuracy ${(before * 100).toFixed(1)}% (the LM's own likelihood prefers the chosen answer in ${(lm * 100).toFixed(1)}%)`,
  );
  let order = shuffle(
    trainIds.map((_, i) => i),
    seed,
  );
  let lastLoss = NaN;
  for (let step = 0; step < maxSteps; step++) {
    const start = (step * batchSize) % trainIds.length;
    if (start < batchSize && step > 0) order = shuffle(order, seed + step);
    const batch = order.slice(start, start + batchSize).map((i) => trainIds[i]!);
    let sum = 0;
    for (let m = 0; m < batch.length; m += micro) {
      const mb = batch.slice(m, m + micro);
      sum += await trainer.accumulateAsync(() => {
        const s = sequenceScores(
          model,
          mb.flatMap((p) => p),
        );
        // Scores come chosen, rejected, chosen, ...: columns of [pairs, 2] (no gather, whose
        // gradient some backends lack).
        const [c, r] = tf.split(tf.reshape(s, [mb.length, 2]), 2, 1);
        return bradleyTerryLoss(
          tf.reshape(c!, [mb.length]) as tf.Tensor1D,
          tf.reshape(r!, [mb.length]) as tf.Tensor1D,
          o.margin ?? 0,
        );
      });
    }
    await trainer.stepAsync();
    lastLoss = sum / Math.ceil(batch.length / micro);
    if ((step + 1) % 10 === 0 || step === 0)
      log(`train_rm: step ${step + 1} loss ${lastLoss.toFixed(4)}`);
  }
  const after = heldIds.length ? await accuracy(model, heldIds, micro) : NaN;
  await model.readToHost();
  saveModel(o.savePath, model, { tokenizerFrom: pretrain });
  const result: RmResult = {
    steps: maxSteps,
    finalLoss: lastLoss,
    evalAccuracyBefore: before,
    evalAccuracy: after,
    lmAccuracy: lm,
  };
  writeFileSync(join(o.savePath, 'training_summary.json'), JSON.stringify(result, null, 2) + '\n');
  log(
    `train_rm: held-out pairwise accuracy ${(before * 100).toFixed(1)}% -> ${(after * 100).toFixed(1)}%; saved ${o.savePath}`,
  );
  trainer.dispose();
  model.dispose();
  return result;
}

type RmFlagOptions = Omit<RmOptions, 'verbose' | 'savePath'> & { savePath?: string };

const rmFlags = flagParser<RmFlagOptions>(
  'train_rm',
  [
    {
      key: 'pretrain',
      kind: 'string',
      help: 'HF model directory to start from; default: the shipped warm start',
    },
    {
      key: 'dataset',
      kind: 'string',
      help: "built-in preference set ('arith') or JSONL of {prompt, chosen, rejected}",
    },
    { key: 'datasetSize', kind: 'int', help: 'built-in training pairs', min: 1 },
    {
      key: 'evalSize',
      kind: 'int',
      help: "held-out pairs: the built-in test split's, or a file's last (default a tenth)",
      min: 0,
    },
    {
      key: 'savePath',
      kind: 'string',
      help: 'output HF directory (with value_head)',
      required: true,
    },
    { key: 'batchSize', kind: 'int', help: 'pairs per optimizer step', min: 1 },
    { key: 'microBatchSize', kind: 'int', help: 'pairs per forward/backward', min: 1 },
    { key: 'lr', kind: 'float', help: 'peak learning rate (cosine decay)', min: 0 },
    { key: 'maxSteps', kind: 'int', help: 'optimizer steps', min: 1 },
    { key: 'margin', kind: 'float', help: 'Bradley–Terry margin the chosen score should lead by' },
    { key: 'seed', kind: 'int', help: 'seed', min: 0 },
  ],
  { dataset: 'arith' },
);

/** Parses `train_rm` command-line arguments and runs it. */
export async function main(argv: string[]): Promise<void> {
  const opts = await resolveCheckpointFlags(rmFlags.parse(argv).options, {
    pretrain: '--pretrain',
  });
  if (opts.pretrain) opts.pretrain = resolve(opts.pretrain);
  await trainRm({ ...opts, savePath: resolve(opts.savePath!) });
}

runIfMain(import.meta.url, 'train_rm', main, () => rmFlags.help());
