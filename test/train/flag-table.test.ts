/**
 * A flag is declared once, as a row of `train/ppo/flag-table.ts`, and reaches everything that
 * reads flags from there: each row, set on the command line, comes out of the one parse with its
 * value and as `given`, shows in the job's config table as set by a flag with its default, has its
 * `--help` line, and, for a row declared for a library option object (`lib(['loss'], …)`), reaches
 * that object under its own name (the trainer's loss options through the role's init). Nothing
 * here names a flag: a new row is covered as it is added.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { kebab } from '../../train/driver-flags.ts';
import {
  type Flag,
  flagConfig,
  flagTable,
  trainPpoDefaults,
  trainPpoFlagParser,
  trainPpoHelp,
} from '../../train/ppo/flags.ts';
import { libraryDefaults, type LibraryOptions } from '../../train/ppo/flag-table.ts';
import {
  distillOptions,
  experienceOptions,
  klOptions,
  policyLossOptions,
} from '../../train/ppo/options.ts';
import { roleInits } from '../../train/ppo/roles.ts';
import { compileRunConfig } from '../../train/ppo/run-config.ts';

/** A command line that sets `f` to a value other than its default, and that value as parsed. */
function setting(f: Flag): { argv: string[]; value: unknown } {
  const name = `--${kebab(f.key)}`;
  const d = f.default;
  switch (f.kind) {
    case 'bool':
      return d === true
        ? { argv: [`--no-${kebab(f.key)}`], value: false }
        : { argv: [name], value: true };
    case 'int': {
      const n = Math.max(((d as number | undefined) ?? f.min ?? 0) + 1, f.min ?? -Infinity);
      return { argv: [name, String(n)], value: n };
    }
    case 'float': {
      const x = Math.max(((d as number | undefined) ?? f.min ?? 1) + 0.5, f.min ?? -Infinity);
      return { argv: [name, String(x)], value: x };
    }
    case 'pair': {
      const [lo, hi] = (d as readonly [number, number] | undefined) ?? [0.5, 2];
      const v = [lo - 0.25, hi + 0.25];
      return { argv: [name, String(v[0]), String(v[1])], value: v };
    }
    case 'string': {
      const v = f.choices?.find((c) => c !== d) ?? `value-of-${f.key}`;
      return { argv: [name, v], value: v };
    }
  }
}

/** The library option objects as `train_ppo` builds them from options `o`. */
const libraryObjects = (
  o: Parameters<typeof policyLossOptions>[0],
): Record<LibraryOptions, Record<string, unknown>> => ({
  loss: { ...policyLossOptions(o) },
  kl: { ...klOptions(o) },
  experience: { ...experienceOptions(o) },
  distill: { ...distillOptions(o) },
});

test('every row set on the command line reaches the parsed options, as given, and the config table', () => {
  for (const f of flagTable) {
    const { argv, value } = setting(f);
    assert.not.equal(value, f.default, `${argv[0]}: the test's value differs from the default`);
    const { options, given } = trainPpoFlagParser.parse(argv);
    assert.equal(options[f.key], value, `${argv.join(' ')}`);
    assert.equal([...given], [f.key], `${argv[0]} is the one key given`);
    const name = `--${kebab(f.key)}`;
    const row = flagConfig(options, given).find((r) => r.name === name);
    assert.ok(row, `${name} is in the job's config table`);
    assert.is(row.source, 'flag', argv[0]);
    assert.is(row.section, f.section, argv[0]);
    const shown = Array.isArray(value) ? value.join(' ') : String(value);
    assert.is(row.value, f.secret ? '(hidden)' : shown, argv[0]);
  }
});

test('the defaults are the rows’ defaults, and every row has its --help line with its default', () => {
  const help = trainPpoHelp().split('\n');
  for (const f of flagTable) {
    assert.equal(trainPpoDefaults[f.key], f.default, f.key);
    const line = help.find((l) => l.startsWith(`  --${kebab(f.key)} `));
    assert.ok(line, `--${kebab(f.key)} has a --help line`);
    assert.ok(line.includes(f.help), `--${kebab(f.key)}: its help text`);
    const d = f.default;
    if (d !== undefined && d !== '') {
      const text = Array.isArray(d) ? d.join(' ') : String(d);
      assert.ok(line.includes(`(default ${text})`), `--${kebab(f.key)}: its default`);
    }
  }
});

test('a row declared for a library option object reaches it by name', () => {
  for (const f of flagTable.filter((f) => f.to !== undefined)) {
    const { argv, value } = setting(f);
    const objects = libraryObjects(trainPpoFlagParser.parse(argv).options);
    for (const to of f.to!) assert.equal(objects[to][f.key], value, `${argv[0]} → ${to}`);
  }
});

test('a row named as a library option is declared for it (but --init-kl-coef, whose default differs)', () => {
  // train_ppo starts without a reference (0); the KL library's own default is 0.01.
  const mappedByHand: Partial<Record<LibraryOptions, string[]>> = { kl: ['initKlCoef'] };
  for (const to of Object.keys(libraryDefaults) as LibraryOptions[]) {
    const undeclared = flagTable
      .filter((f) => f.key in libraryDefaults[to] && !f.to?.includes(to))
      .map((f) => f.key)
      .filter((k) => !mappedByHand[to]?.includes(k));
    assert.equal(undeclared, [], `declare these rows with lib(['${to}'], …)`);
  }
});

test("a loss row reaches the trainer's init through the roles' options", () => {
  const lossRows = flagTable.filter((f) => f.to?.includes('loss'));
  assert.ok(lossRows.length > 10, 'the loss settings are declared for the loss options');
  for (const f of lossRows) {
    const { argv, value } = setting(f);
    const init = roleInits(compileRunConfig(trainPpoFlagParser.parse(argv).options, 1));
    assert.equal((init.trainer.loss as Record<string, unknown>)[f.key], value, argv[0]);
  }
});

test.run();
