/**
 * The "did you mean" of an unknown flag, by meaning first and spelling second: a name other
 * trainers use for the same setting (`--lr`, `--weight-decay`, `--num-generations`), then a flag
 * sharing most of its words (`--kl-coef` → `--init-kl-coef`), then a typo within a few edits,
 * where the edits are few for the name's length (`--stepz` → `--steps`, but `--zz` suggests
 * nothing rather than `--l2`).
 *
 * @module
 */

/**
 * Names of a setting in other trainers (TRL, verl, HF Trainer, OpenRLHF) and the flags that
 * hold it here, in order of preference; a flag the parser does not have is skipped.
 */
const synonyms: Readonly<Record<string, readonly string[]>> = {
  lr: ['actor-learning-rate', 'learning-rate'],
  'learning-rate': ['actor-learning-rate'],
  'weight-decay': ['l2'],
  wd: ['l2'],
  'kl-coef': ['init-kl-coef'],
  beta: ['init-kl-coef'],
  'kl-beta': ['init-kl-coef'],
  epochs: ['max-epochs', 'epochs'],
  'num-epochs': ['max-epochs', 'epochs'],
  'ppo-epochs': ['max-epochs'],
  'max-grad-norm': ['max-norm'],
  'grad-clip': ['max-norm'],
  'clip-grad-norm': ['max-norm'],
  'max-tokens': ['generate-max-len'],
  'max-length': ['generate-max-len'],
  'response-length': ['generate-max-len'],
  'max-completion-length': ['generate-max-len'],
  'max-prompt-length': ['prompt-max-len'],
  model: ['pretrain'],
  'model-path': ['pretrain'],
  'model-name-or-path': ['pretrain'],
  dataset: ['prompt-data', 'dataset'],
  'train-data': ['prompt-data', 'dataset'],
  'train-file': ['prompt-data', 'dataset'],
  steps: ['max-steps'],
  'total-steps': ['max-steps'],
  'num-steps': ['max-steps'],
  'train-steps': ['max-steps'],
  warmup: ['lr-warmup-ratio'],
  'warmup-ratio': ['lr-warmup-ratio'],
  'group-size': ['n-samples-per-prompt'],
  'num-generations': ['n-samples-per-prompt'],
  'n-samples': ['n-samples-per-prompt'],
  'output-dir': ['save-path'],
  'save-dir': ['save-path'],
  'clip-ratio': ['eps-clip'],
  cliprange: ['eps-clip'],
  'tensor-parallel-size': ['rollout-num-gpus-per-engine'],
  'resume-from-checkpoint': ['load-checkpoint'],
  resume: ['load-checkpoint'],
};

/** Words that say nothing about which setting a flag is. */
const noise = new Set(['num', 'max', 'min', 'per', 'use', 'enable', 'size', 'of', 'to', 'n']);

const words = (name: string): string[] => name.split('-').filter((w) => w && !noise.has(w));

/**
 * The flag of `names` (kebab, without `--`) that an unknown `name` most likely meant, or
 * undefined: by synonym, then by shared words (most of `name`'s), then by spelling.
 *
 * @example
 * suggestFlag('weight-decay', ['l2', 'lr-warmup-ratio']); // 'l2'
 * suggestFlag('zz', ['l2']); // undefined
 */
export function suggestFlag(name: string, names: Iterable<string>): string | undefined {
  const all = [...names];
  const known = new Set(all);
  const synonym = synonyms[name]?.find((n) => known.has(n));
  if (synonym) return synonym;
  const own = words(name);
  let best: string | undefined;
  let bestScore = 0;
  for (const n of all) {
    const theirs = words(n);
    const shared = own.filter((w) => theirs.includes(w)).length;
    // Shared words first; among equals, the flag with fewer words of its own.
    const score = shared === 0 ? 0 : shared - theirs.length / 100;
    if (shared * 2 > own.length && score > bestScore) [best, bestScore] = [n, score];
  }
  if (best) return best;
  return closest(name, all, Math.min(3, Math.floor(name.length / 3)));
}

/** The name of `names` nearest to `name`, within `maxDistance` edits, or undefined. */
export function closest(
  name: string,
  names: Iterable<string>,
  maxDistance: number,
): string | undefined {
  let best: string | undefined;
  let bestD = maxDistance + 1;
  for (const k of names) {
    const d = distance(name, k);
    if (d < bestD) [best, bestD] = [k, d];
  }
  return best;
}

function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return row[b.length]!;
}
