/**
 * `eval_arith`: held-out accuracy of an HF model directory on the built-in `arith` task, greedy and
 * sampled, split by answer strategy (worked: the equation first; direct: the answer at once) and by
 * problem family. This is how the numbers in model/README.md and the README's "Learning"
 * section are measured. `--engine llamacpp` generates the answers in llama.cpp instead.
 *
 * @example
 * node --import tsx train/eval-arith.ts ./ckpt/JOB --prompts 500 --samples 2
 * node --import tsx train/eval-arith.ts ./ckpt/JOB --engine llamacpp --rollout-dtype f32
 *
 * @module
 */
import { resolve } from 'node:path';
import { createEngine, type LocalEngineKind } from '../engines/registry.ts';
import { initBackend } from '../model/backend.ts';
import { loadModel } from '../model/checkpoint.ts';
import type { GgufDtype } from '../model/gguf/index.ts';
import { arithDataset } from './data/arith.ts';
import {
  checkRolloutDtype,
  FlagError,
  flagParser,
  localEngineFlags,
  runIfMain,
} from './driver-flags.ts';
import { evalArith } from './sft.ts';
import { InvalidArgumentError } from '../runtime/errors.ts';

/** One answer of the evaluation. */
interface Answer {
  kind: string;
  direct: boolean;
  reward: number;
}

/** What {@link evalArithModel} measures; accuracies are fractions. */
export interface ArithEvalReport {
  prompts: number;
  greedy: { accuracy: number; directShare: number };
  sampled: {
    samples: number;
    accuracy: number;
    directShare: number;
    directAccuracy: number;
    workedAccuracy: number;
  };
  byKind: Record<string, { greedy: number; direct: number; worked: number }>;
}

const mean = (xs: Answer[]): number =>
  xs.length ? xs.reduce((s, x) => s + x.reward, 0) / xs.length : NaN;

/** Options of {@link evalArithModel}. */
export interface ArithEvalOptions {
  /** Held-out problems (the first n of `arith:test`). @default 500 */
  prompts?: number;
  /** Sampled answers per problem at temperature 1. @default 2 */
  samples?: number;
  /** @default 48 */
  maxNewTokens?: number;
  /** Engine that generates the answers. @default 'builtin' */
  engine?: LocalEngineKind;
  /** GGUF element type of `engine: 'llamacpp'`. @default 'f32' */
  rolloutDtype?: GgufDtype;
}

/** Evaluates `dir` on held-out problems: greedy, and `samples` answers per problem at temperature 1. */
export async function evalArithModel(
  dir: string,
  o: ArithEvalOptions = {},
): Promise<ArithEvalReport> {
  const { prompts = 500, samples = 2, maxNewTokens = 48 } = o;
  await initBackend();
  const { model, tokenizer } = await loadModel(dir);
  if (!tokenizer) throw new InvalidArgumentError(`eval_arith: ${dir} has no tokenizer.json`);
  const engine = await createEngine(o.engine, {
    model,
    tokenizer,
    dtype: o.rolloutDtype,
    maxBatchSize: 256,
    maxSequences: 64,
  });
  try {
    const records = arithDataset({ split: 'test', size: prompts });
    const run = async (greedy: boolean): Promise<Answer[]> =>
      (await evalArith(engine, tokenizer, records, { greedy, maxNewTokens })).samples.map((x) => ({
        kind: x.kind,
        direct: x.output.trimStart().startsWith('The answer'),
        reward: x.reward,
      }));
    const greedy = await run(true);
    const sampled: Answer[] = [];
    for (let k = 0; k < samples; k++) sampled.push(...(await run(false)));
    const byKind: ArithEvalReport['byKind'] = {};
    for (const kind of [...new Set(records.map((r) => r.kind))]) {
      byKind[kind] = {
        greedy: mean(greedy.filter((x) => x.kind === kind)),
        direct: mean(sampled.filter((x) => x.kind === kind && x.direct)),
        worked: mean(sampled.filter((x) => x.kind === kind && !x.direct)),
      };
    }
    return {
      prompts: records.length,
      greedy: {
        accuracy: mean(greedy),
        directShare: greedy.filter((x) => x.direct).length / greedy.length,
      },
      sampled: {
        samples: sampled.length,
        accuracy: mean(sampled),
        directShare: sampled.length ? sampled.filter((x) => x.direct).length / sampled.length : NaN,
        directAccuracy: mean(sampled.filter((x) => x.direct)),
        workedAccuracy: mean(sampled.filter((x) => !x.direct)),
      },
      byKind,
    };
  } finally {
    await engine.close();
    model.dispose();
  }
}

const pct = (x: number): string => (Number.isNaN(x) ? '  -  ' : `${(x * 100).toFixed(1)}%`);

const evalFlags = flagParser<{
  prompts: number;
  samples: number;
  engine: LocalEngineKind;
  rolloutDtype: GgufDtype;
  json: boolean;
}>(
  'eval_arith',
  [
    { key: 'prompts', kind: 'int', help: 'held-out problems (at most 500 are distinct)', min: 1 },
    { key: 'samples', kind: 'int', help: 'sampled answers per problem at temperature 1', min: 0 },
    ...localEngineFlags('engine that answers'),
    { key: 'json', kind: 'bool', help: 'print the report as JSON' },
  ],
  { prompts: 500, samples: 2, engine: 'builtin', rolloutDtype: 'f32', json: false },
  { positionals: '<model-dir>' },
);

/** Parses `eval_arith` arguments, evaluates and prints a report (`--json` for machine output). */
export async function main(argv: string[]): Promise<void> {
  const { options: o, positionals } = evalFlags.parse(argv);
  if (positionals.length !== 1) {
    throw new FlagError('<model-dir>', 'give one HF model directory, e.g. eval_arith ./ckpt/JOB');
  }
  checkRolloutDtype(o);
  const r = await evalArithModel(resolve(positionals[0]!), o);
  if (o.json) {
    console.log(JSON.stringify(r, null, 2));
    return;
  }
  console.log(
    `greedy   ${pct(r.greedy.accuracy)} on ${r.prompts} held-out problems; direct answers ${pct(r.greedy.directShare)}`,
  );
  if (r.sampled.samples) {
    console.log(
      `sampled  ${pct(r.sampled.accuracy)} over ${r.sampled.samples} answers (T=1); direct ${pct(r.sampled.directShare)} of them, ` +
        `right ${pct(r.sampled.directAccuracy)}; worked right ${pct(r.sampled.workedAccuracy)}`,
    );
  }
  console.log('family        greedy  sampled-direct  sampled-worked');
  for (const [kind, v] of Object.entries(r.byKind))
    console.log(
      `${kind.padEnd(12)}  ${pct(v.greedy).padStart(6)}  ${pct(v.direct).padStart(14)}  ${pct(v.worked).padStart(14)}`,
    );
}

runIfMain(import.meta.url, 'eval_arith', main, () => evalFlags.help());
