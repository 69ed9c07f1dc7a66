/**
 * The flags `train_ppo` accepts, the flags its `--help` prints and the flags `algorithms/README.md`
 * documents agree in both directions: a documented flag that does not parse, an algorithm flag
 * without a documented formula, or a help line for a flag that is not in the table fails here.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { nearMissFlags } from '../../train/foreign-flags.ts';
import { openrlhfDottedFlags } from '../../train/ppo/dotted-flags.ts';
import { flagTable, parseTrainPpoFlags, trainPpoHelp } from '../../train/ppo/flags.ts';

const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
const tableFlags = new Set(flagTable.map((f) => `--${kebab(f.key)}`));
const readme = readFileSync(new URL('../../algorithms/README.md', import.meta.url), 'utf8');
/** Flags named in the first column of the README's "Flags and formulas" table. */
const documented = new Set(
  readme
    .split('\n')
    .filter((l) => l.startsWith('| `--'))
    .flatMap((l) =>
      [...(l.replace(/\\\|/g, '/').split('|')[1] ?? '').matchAll(/--[a-z][a-z0-9-]*/g)].map(
        (m) => m[0],
      ),
    ),
);
const helpFlags = new Set(
  [...trainPpoHelp().matchAll(/^ {2}(--[a-z][a-z0-9-]*)/gm)].map((m) => m[1]!),
);

test('every flag in algorithms/README.md is a train_ppo flag', () => {
  const unknown = [...documented].filter((f) => !tableFlags.has(f));
  assert.equal(unknown, [], `documented but not accepted: ${unknown.join(' ')}`);
});

test('every algorithm flag of the table is documented in algorithms/README.md', () => {
  const missing = flagTable
    .filter((f) => f.section === 'algorithm')
    .map((f) => `--${kebab(f.key)}`)
    .filter((f) => !documented.has(f));
  assert.equal(missing, [], `accepted but not documented: ${missing.join(' ')}`);
});

test('--help prints exactly the flags of the table', () => {
  assert.equal([...helpFlags].sort(), [...tableFlags].sort());
});

test('every documented flag parses (with a value of its kind)', () => {
  const sample: Record<string, string[]> = {
    int: ['4'],
    float: ['0.1'],
    string: [],
    pair: ['0.5', '5'],
    bool: [],
  };
  const floats: Partial<Record<string, string>> = { dualClip: '3', behavImpWeightCap: '3' };
  for (const f of flagTable.filter((x) => documented.has(`--${kebab(x.key)}`))) {
    const value =
      f.kind === 'string'
        ? [f.choices?.[1] ?? f.choices?.[0] ?? 'x']
        : floats[f.key]
          ? [floats[f.key]!]
          : sample[f.kind]!;
    const argv = [`--${kebab(f.key)}`, ...value];
    // Flags that only make sense together with another one get it.
    if (
      f.key === 'useDecoupledLoss' ||
      f.key === 'maxHeadOffpolicyness' ||
      f.key === 'behavImpWeightCap'
    )
      argv.push('--async-train');
    if (f.key === 'useKlLoss') argv.push('--init-kl-coef', '0.01');
    if (f.key === 'teacherKlCoef' || f.key === 'taskRewardCoef')
      argv.push('--teacher-pretrain', 'teacher');
    if (f.key === 'overlongBufferLen') argv.push('--generate-max-len', '48');
    if (f.key === 'lossAggMode' || f.key === 'advantageEstimator') continue; // choices checked below
    parseTrainPpoFlags(argv);
  }
  for (const mode of ['token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum-norm'])
    parseTrainPpoFlags(['--loss-agg-mode', mode]);
});

/** The README's "Porting an OpenRLHF script" section. */
const porting = (() => {
  const top = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const from = top.indexOf('### Porting an OpenRLHF script');
  assert.ok(from >= 0, 'README.md has a section "Porting an OpenRLHF script"');
  const to = top.indexOf('\n#', from + 4);
  // Table cells without the padding prettier aligns them with.
  return top.slice(from, to < 0 ? undefined : to).replace(/ +\|/g, ' |');
})();

test("the README's porting table lists exactly the flags whose default differs from OpenRLHF's (H11)", () => {
  const rows = [...porting.matchAll(/^\| `(--[a-z][a-z0-9-]*)`[^|]*\| ([^|]+) \| ([^|]+) \|$/gm)];
  const listed = rows.map((m) => m[1]!).sort();
  const marked = flagTable
    .filter((f) => f.openrlhf !== undefined)
    .map((f) => `--${kebab(f.key)}`)
    .sort();
  assert.equal(listed, marked);
  for (const f of flagTable.filter((x) => x.openrlhf !== undefined)) {
    const row = rows.find((m) => m[1] === `--${kebab(f.key)}`)!;
    assert.ok(row[3]!.startsWith(f.openrlhf!), `${row[1]}: OpenRLHF ${f.openrlhf}`);
  }
});

test('the README and --help list each near-miss flag with its rtjob spelling (H12)', () => {
  for (const [name, ours] of Object.entries(nearMissFlags)) {
    const snake = `--${name.replace(/-/g, '_')}`;
    assert.ok(porting.includes(`| \`${snake}\` | \`${ours}\` |`), `README: ${snake} → ${ours}`);
    assert.ok(trainPpoHelp().includes(`OpenRLHF ${snake}: ${ours}`), `--help: ${snake}`);
  }
});

test("the README's v0.11 table is the parser's: every dotted name and the flat flag it reads (H7)", () => {
  const pairs = [...porting.matchAll(/`--([a-z_]+(?:\.[a-z_]+)+)` \| `--([a-z_]+)`/g)].map(
    (m) => [m[1]!, m[2]!.replace(/_/g, '-')] as const,
  );
  assert.equal(Object.fromEntries(pairs), openrlhfDottedFlags);
  assert.is(pairs.length, Object.keys(openrlhfDottedFlags).length);
});

test.run();
