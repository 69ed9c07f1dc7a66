/**
 * The built-in task: seeded, reproducible arithmetic and very short word problems with
 * GSM8K-style gold answers (`solution` ends `#### N`). Difficulty is mixed on purpose (one-digit
 * sums a tiny model learns fast, two-digit carries and two-step problems it learns slowly), so a
 * warm-started model is right on some problems and RL has room to improve it.
 *
 * @module
 */
import { seededRandom } from '../../model/sampling.ts';

export { seededRandom };

/**
 * One problem. `prompt` is the question only; chat templates are applied by the consumer. A type,
 * not an interface, so records are plain `Record<string, unknown>` rows (`PromptSampler`).
 */
export type ArithRecord = {
  /** The question, e.g. `What is 47+38?`. */
  prompt: string;
  /** The gold number as a string, e.g. `85`. */
  answer: string;
  /** Worked solution ending `#### N` (GSM8K style); also the RL label. */
  solution: string;
  /** The worked response: the equation(s), then the answer: `47+38=85. The answer is 85.` */
  response: string;
  /** The direct response, the answer alone: `The answer is 85.` */
  direct: string;
  /** Problem family (`add`, `sub`, `mul`, `word-add`, ...), for per-family metrics. */
  kind: string;
};

/** Options of {@link arithDataset}. */
export interface ArithOptions {
  /** `train` or `test` (held-out: disjoint prompts, different stream). @default 'train' */
  split?: 'train' | 'test';
  /** Number of records. @default 20000 for train, 500 for test */
  size?: number;
  /** Seed of the generator. @default 1234 */
  seed?: number;
}

const names = ['Ann', 'Bob', 'Cat', 'Dan', 'Eve', 'Sam', 'Tom', 'Mia'];
const things = ['apples', 'pens', 'eggs', 'cards', 'books', 'coins'];

type Gen = (r: () => number) => ArithRecord;

const int = (r: () => number, lo: number, hi: number): number =>
  lo + Math.floor(r() * (hi - lo + 1));
const pick = <T>(r: () => number, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;

function make(kind: string, prompt: string, steps: string[], n: number): ArithRecord {
  return {
    prompt,
    answer: String(n),
    solution: `${steps.join('\n')}\n#### ${n}`,
    response: `${steps.join('. ')}. The answer is ${n}.`,
    direct: `The answer is ${n}.`,
    kind,
  };
}

const families: [number, Gen][] = [
  [
    2,
    (r) => {
      const a = int(r, 1, 9),
        b = int(r, 1, 9);
      return make('add1', `What is ${a}+${b}?`, [`${a}+${b}=${a + b}`], a + b);
    },
  ],
  [
    3,
    (r) => {
      const a = int(r, 10, 99),
        b = int(r, 1, 99);
      return make('add', `What is ${a}+${b}?`, [`${a}+${b}=${a + b}`], a + b);
    },
  ],
  [
    2,
    (r) => {
      const a = int(r, 10, 99),
        b = int(r, 1, a);
      return make('sub', `What is ${a}-${b}?`, [`${a}-${b}=${a - b}`], a - b);
    },
  ],
  [
    2,
    (r) => {
      const a = int(r, 2, 9),
        b = int(r, 2, 12);
      return make('mul', `What is ${a}*${b}?`, [`${a}*${b}=${a * b}`], a * b);
    },
  ],
  [
    2,
    (r) => {
      const who = pick(r, names),
        what = pick(r, things),
        a = int(r, 2, 30),
        b = int(r, 2, 20);
      return make(
        'word-add',
        `${who} has ${a} ${what} and gets ${b} more. How many now?`,
        [`${a}+${b}=${a + b}`],
        a + b,
      );
    },
  ],
  [
    2,
    (r) => {
      const who = pick(r, names),
        what = pick(r, things),
        a = int(r, 5, 40),
        b = int(r, 1, a);
      return make(
        'word-sub',
        `${who} has ${a} ${what} and gives away ${b}. How many left?`,
        [`${a}-${b}=${a - b}`],
        a - b,
      );
    },
  ],
  [
    1,
    (r) => {
      const what = pick(r, things),
        a = int(r, 2, 9),
        b = int(r, 2, 9);
      return make(
        'word-mul',
        `${a} bags hold ${b} ${what} each. How many ${what}?`,
        [`${a}*${b}=${a * b}`],
        a * b,
      );
    },
  ],
  [
    1,
    (r) => {
      const who = pick(r, names),
        what = pick(r, things),
        a = int(r, 2, 20),
        b = int(r, 2, 20),
        c = int(r, 1, a + b);
      return make(
        'word-2step',
        `${who} has ${a} ${what}, gets ${b} more, then loses ${c}. How many now?`,
        [`${a}+${b}=${a + b}`, `${a + b}-${c}=${a + b - c}`],
        a + b - c,
      );
    },
  ],
];
const totalWeight = families.reduce((s, [w]) => s + w, 0);

function generate(r: () => number): ArithRecord {
  let x = r() * totalWeight;
  for (const [w, g] of families) {
    if ((x -= w) < 0) return g(r);
  }
  return families[0]![1](r);
}

/**
 * The built-in dataset. Held-out (`test`) prompts never occur in `train` of the same seed; both
 * are deterministic functions of `seed`.
 *
 * @example
 * const test = arithDataset({ split: 'test', size: 200 });   // [{ prompt, answer, solution, ... }]
 */
export function arithDataset(opts: ArithOptions = {}): ArithRecord[] {
  const split = opts.split ?? 'train';
  const seed = opts.seed ?? 1234;
  const size = opts.size ?? (split === 'train' ? 20000 : 500);
  // The test stream is drawn first so the train split can exclude its prompts.
  const testRand = seededRandom(seed * 2 + 1);
  const testSize = split === 'test' ? size : 500;
  const test: ArithRecord[] = [];
  const testPrompts = new Set<string>();
  while (test.length < testSize) {
    const rec = generate(testRand);
    if (testPrompts.has(rec.prompt)) continue;
    testPrompts.add(rec.prompt);
    test.push(rec);
  }
  if (split === 'test') return test;
  const trainRand = seededRandom(seed * 2);
  const train: ArithRecord[] = [];
  while (train.length < size) {
    const rec = generate(trainRand);
    if (!testPrompts.has(rec.prompt)) train.push(rec);
  }
  return train;
}

/** Named built-in datasets, for `--prompt-data <name>` (e.g. `arith`, `arith:test`). */
export const builtinDatasets: Record<string, (opts?: ArithOptions) => ArithRecord[]> = {
  arith: (o) => arithDataset({ ...o, split: o?.split ?? 'train' }),
  'arith:train': (o) => arithDataset({ ...o, split: 'train' }),
  'arith:test': (o) => arithDataset({ ...o, split: 'test' }),
};

/** Resolves a built-in dataset name, or undefined when `name` is not one. */
export function builtinDataset(name: string, opts?: ArithOptions): ArithRecord[] | undefined {
  return builtinDatasets[name]?.(opts);
}

/** Extracts the model's answer (`\boxed{N}` or `The answer is N`), or undefined. */
export function extractAnswer(text: string): string | undefined {
  const boxed = /\\boxed\{\s*(-?[\d,]*\.?\d+)\s*\}/g;
  let m: RegExpExecArray | null;
  let last: string | undefined;
  while ((m = boxed.exec(text))) last = m[1];
  if (last === undefined) {
    const said = /he answer is\s*\$?(-?[\d,]*\.?\d+)/g;
    while ((m = said.exec(text))) last = m[1];
  }
  return last?.replace(/,/g, '');
}

/** 1 when the response's extracted answer equals the gold number, else 0. */
export function arithReward(response: string, answer: string): number {
  const pred = extractAnswer(response);
  const gold = answer.includes('####')
    ? answer.split('####').pop()!.trim().replace(/,/g, '')
    : answer.trim();
  return pred !== undefined && Number(pred) === Number(gold) ? 1 : 0;
}
