/**
 * `eval_arith`: held-out accuracy of an HF model directory on the built-in `arith` task, greedy and
 * sampled, split by answer strategy (worked: the equation first; direct: the answer at once) and by
 * problem family. This is how the numbers in actors/model/README.md and the README's "Learning"
 * section are measured.
 *
 * @example
 * node --import tsx algorithms/eval-arith.ts ./ckpt/ppo --prompts 500 --samples 2
 *
 * @module
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Command } from 'commander';
import { BuiltinEngine } from '../actors/engines/builtin/engine.ts';
import { initBackend } from '../actors/model/backend.ts';
import { loadModel } from '../actors/model/checkpoint.ts';
import { arithDataset } from './datasets/arith.ts';
import { evalArith } from './train-sft.ts';

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
  sampled: { samples: number; accuracy: number; directShare: number; directAccuracy: number; workedAccuracy: number };
  byKind: Record<string, { greedy: number; direct: number; worked: number }>;
}

const mean = (xs: Answer[]): number => (xs.length ? xs.reduce((s, x) => s + x.reward, 0) / xs.length : NaN);

/** Evaluates `dir` on the first `prompts` held-out problems; `samples` answers per problem at temperature 1. */
export async function evalArithModel(dir: string, prompts = 500, samples = 2, maxNewTokens = 48): Promise<ArithEvalReport> {
  await initBackend();
  const { model, tokenizer } = await loadModel(dir);
  if (!tokenizer) throw new Error(`eval_arith: ${dir} has no tokenizer.json`);
  const engine = await BuiltinEngine.create({ model, tokenizer, maxBatchSize: 256 });
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
      greedy: { accuracy: mean(greedy), directShare: greedy.filter((x) => x.direct).length / greedy.length },
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

/** Parses `eval_arith` arguments, evaluates and prints a report (`--json` for machine output). */
export async function main(argv: string[]): Promise<void> {
  const cmd = new Command('eval_arith')
    .description('held-out accuracy on the built-in arith task, by strategy and family')
    .argument('<model-dir>', 'HF model directory (e.g. ./ckpt/ppo)')
    .option('--prompts <n>', 'held-out problems (at most 500 are distinct)', Number, 500)
    .option('--samples <n>', 'sampled answers per problem at temperature 1', Number, 2)
    .option('--json', 'print the report as JSON');
  cmd.parse(argv, { from: 'user' });
  const o = cmd.opts<{ prompts: number; samples: number; json?: boolean }>();
  for (const [flag, v] of [['--prompts', o.prompts], ['--samples', o.samples]] as const) {
    if (!Number.isInteger(v) || v < (flag === '--samples' ? 0 : 1)) throw new Error(`eval_arith: ${flag} must be a whole number, got ${String(v)}`);
  }
  const r = await evalArithModel(resolve(cmd.args[0]!), o.prompts, o.samples);
  if (o.json) {
    console.log(JSON.stringify(r, null, 2));
    return;
  }
  console.log(`greedy   ${pct(r.greedy.accuracy)} on ${r.prompts} held-out problems; direct answers ${pct(r.greedy.directShare)}`);
  if (r.sampled.samples) {
    console.log(
      `sampled  ${pct(r.sampled.accuracy)} over ${r.sampled.samples} answers (T=1); direct ${pct(r.sampled.directShare)} of them, ` +
        `right ${pct(r.sampled.directAccuracy)}; worked right ${pct(r.sampled.workedAccuracy)}`,
    );
  }
  console.log('family        greedy  sampled-direct  sampled-worked');
  for (const [kind, v] of Object.entries(r.byKind)) console.log(`${kind.padEnd(12)}  ${pct(v.greedy).padStart(6)}  ${pct(v.direct).padStart(14)}  ${pct(v.worked).padStart(14)}`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main(process.argv.slice(2)).catch((e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  });
}
