/**
 * The one command-line parser of the drivers (`train_ppo`, `train_sft`, `eval_arith`): a table of
 * flags, each with a kind, a help line and optionally choices, a minimum, aliases and an
 * environment variable. Kebab and snake case are both accepted (`--n-samples-per-prompt`,
 * `--n_samples_per_prompt=8`), `--no-x` negates a boolean, and every bad value fails with one
 * line that names the flag (`--lr: expected a number, got 'abc'`). Hand-written rather than a
 * CLI library because the same table also drives `--help`, the environment fallbacks and the
 * test that keeps `algorithms/README.md` and the flags in agreement.
 *
 * @module
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { engineSpec, ggufEngineNames, localEngineKinds } from '../engines/registry.ts';
import { ggufDtypes } from '../model/gguf/index.ts';
import { isHubError } from '../model/hub/index.ts';
import { type EnvName, readEnv } from '../runtime/env.ts';
import { RtjobError } from '../runtime/errors.ts';
import { suggestFlag } from './flag-suggest.ts';
import { foreignFlagNote } from './foreign-flags.ts';

/** How a flag's value is read. `pair` takes two numbers (`--x 0.8 1.2` or `--x=0.8,1.2`). */
export type FlagKind = 'int' | 'float' | 'bool' | 'string' | 'pair';

/** One row of a flag table; `K` is the options key it sets. */
export interface FlagSpec<K extends string = string> {
  key: K;
  kind: FlagKind;
  help: string;
  /** Group heading in `--help`; a change of section starts a new group. */
  section?: string;
  choices?: readonly string[];
  /** Other names of choices, accepted and mapped, e.g. `{ grpo: 'group_norm' }`. */
  choiceAliases?: Readonly<Record<string, string>>;
  min?: number;
  /** Other names (kebab), e.g. OpenRLHF's older spellings. */
  aliases?: string[];
  /** Environment variable read when the flag is absent. */
  env?: EnvName;
  /** The run cannot start without it. */
  required?: boolean;
  /** The value of a `string` flag given alone (`--use-wandb` as the last or before another flag). */
  bare?: string;
  /** A value not to show (an API key): the config table and trackers show `(hidden)`. */
  secret?: boolean;
  /** OpenRLHF's default of the same flag, where it differs (`--help` shows `[OpenRLHF: x]`). */
  openrlhf?: string;
}

/** A bad flag or flag combination; `flag` names it. Drivers exit 2 on it, printing one line. */
export class FlagError extends RtjobError<'BAD_FLAG'> {
  override get name(): string {
    return 'FlagError';
  }

  constructor(
    readonly flag: string,
    message: string,
  ) {
    super('BAD_FLAG', message);
  }
}

/**
 * `--engine builtin|llamacpp` and `--rollout-dtype` of the commands that generate on an
 * in-process engine (train_sft's evaluation, eval_arith, eval_agent); `what` says what the
 * engine does there. Check the pair with {@link checkRolloutDtype}.
 */
export function localEngineFlags(what: string): FlagSpec<'engine' | 'rolloutDtype'>[] {
  return [
    { key: 'engine', kind: 'string', help: what, choices: localEngineKinds },
    {
      key: 'rolloutDtype',
      kind: 'string',
      help: "GGUF element type of --engine llamacpp (f32 gives the builtin engine's tokens)",
      choices: ggufDtypes,
    },
  ];
}

/** Refuses a `--rollout-dtype` other than f32 without `--engine llamacpp` (nothing would use it). */
export function checkRolloutDtype(o: { engine?: string; rolloutDtype?: string }): void {
  if ((o.rolloutDtype ?? 'f32') !== 'f32' && !engineSpec(o.engine ?? 'builtin').gguf)
    throw new FlagError('--rollout-dtype', `--rollout-dtype applies to ${ggufEngineNames()} only`);
}

/**
 * What a parse returns: the options, the keys the command line set, the positionals, and how the
 * user spelled each flag that was given under another name (`--actor-learning-rate` →
 * `--actor.adam.lr`), so later errors can quote the command line ({@link quoteTyped}).
 */
export interface ParsedFlags<O> {
  options: O;
  given: Set<keyof O>;
  positionals: string[];
  spelled: ReadonlyMap<string, string>;
}

/** A parser built from a flag table by {@link flagParser}. */
export interface FlagParser<O> {
  /** Parses `argv` (without the program name); `env` supplies the flags' environment variables. */
  parse(
    argv: readonly string[],
    env?: Readonly<Record<string, string | undefined>>,
  ): ParsedFlags<O>;
  /** The `--help` text. */
  help(): string;
  /** `--name` for an options key. */
  flagName(key: keyof O & string): string;
}

/** `nSamplesPerPrompt` → `n-samples-per-prompt`. */
export const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/**
 * Builds the parser of one driver.
 *
 * @param program the driver's name, for `--help`
 * @param table every flag, in the order `--help` lists them
 * @param defaults the options when no flag is given (a fresh copy per parse)
 * @example
 * const p = flagParser('eval_arith', [{ key: 'prompts', kind: 'int', help: 'problems', min: 1 }], { prompts: 500 },
 *   { positionals: '<model-dir>' });
 * const { options, positionals } = p.parse(process.argv.slice(2));
 */
export function flagParser<O extends object>(
  program: string,
  table: readonly FlagSpec<keyof O & string>[],
  defaults: O,
  opts: {
    positionals?: string;
    sectionTitles?: Readonly<Record<string, string>>;
    note?: string;
    /** Dotted names (`actor.adam.lr`, snake case) read as the flat kebab name they map to. */
    dotted?: Readonly<Record<string, string>>;
  } = {},
): FlagParser<O> {
  const byName = new Map<string, FlagSpec<keyof O & string>>();
  for (const f of table) {
    byName.set(kebab(f.key), f);
    for (const a of f.aliases ?? []) byName.set(a, f);
  }

  const suggest = (name: string): string => {
    const best = suggestFlag(name, byName.keys());
    return best ? ` (did you mean --${best}?)` : '';
  };

  const parse: FlagParser<O>['parse'] = (argv, env = {}) => {
    const o = structuredClone(defaults) as O & Record<string, unknown>;
    const given = new Set<keyof O>();
    const positionals: string[] = [];
    const unknown: Unknown[] = [];
    const spelled = new Map<string, string>();
    for (let i = 0; i < argv.length; i++) {
      const arg = argv[i]!;
      if (!arg.startsWith('--')) {
        if (opts.positionals === undefined) {
          throw new FlagError(arg, `unexpected argument '${arg}' (flags start with --)`);
        }
        positionals.push(arg);
        continue;
      }
      const { flag, name, typed, inline, negated } = lookup(byName, arg, opts.dotted ?? {});
      if (!flag) {
        // Reported with every other unknown flag after the loop; its values are not positionals
        // (all of them where a driver takes none: `--eps_clip_low_high 0.2 0.28`).
        const values: string[] = inline === undefined ? [] : [inline];
        while (
          inline === undefined &&
          argv[i + 1] !== undefined &&
          !argv[i + 1]!.startsWith('--')
        ) {
          values.push(argv[++i]!);
          if (opts.positionals !== undefined) break;
        }
        unknown.push({ name, typed, values });
        continue;
      }
      const shown = `--${kebab(flag.key)}`;
      if (typed !== shown) spelled.set(shown, typed);
      const read = readValue(flag, argv, i, inline, negated, typed);
      i = read.last;
      o[flag.key] = read.value as never;
      given.add(flag.key);
    }
    if (unknown.length > 0) throw unknownFlags(program, unknown, suggest);
    for (const f of table) {
      if (f.env === undefined || given.has(f.key)) continue;
      let value: unknown;
      try {
        value = readEnv(f.env, env);
      } catch (e) {
        throw new FlagError(f.env, (e as Error).message);
      }
      if (value !== undefined) o[f.key] = value as never;
    }
    for (const f of table) {
      if (f.required && o[f.key] === undefined) {
        const err = new FlagError(`--${kebab(f.key)}`, `--${kebab(f.key)} is required`);
        throw quoteTyped(err, spelled);
      }
    }
    return { options: o, given, positionals, spelled };
  };

  const help = (): string => helpText(program, table, defaults, opts);

  return { parse, help, flagName: (key) => `--${kebab(key)}` };
}

/** An unknown flag of a command line: its kebab (or mapped) name, as typed, and its values. */
interface Unknown {
  name: string;
  typed: string;
  values: string[];
}

/**
 * The row `--name[=value]` (or `--no-name`, for a boolean) names, with its kebab name (a dotted
 * name mapped through `dotted` first), the flag as typed, the value given after `=`, and whether
 * it was negated; `flag` is undefined for an unknown name.
 */
function lookup<F extends FlagSpec>(
  byName: ReadonlyMap<string, F>,
  arg: string,
  dotted: Readonly<Record<string, string>>,
): {
  flag: F | undefined;
  name: string;
  typed: string;
  inline: string | undefined;
  negated: boolean;
} {
  const eq = arg.indexOf('=');
  const typed = eq >= 0 ? arg.slice(0, eq) : arg;
  const raw = typed.slice(2);
  const mapped = raw.includes('.') ? dotted[raw.replace(/-/g, '_')] : undefined;
  const name = mapped ?? raw.replace(/[_.]/g, '-');
  const inline = eq >= 0 ? arg.slice(eq + 1) : undefined;
  if (!byName.has(name) && name.startsWith('no-') && byName.get(name.slice(3))?.kind === 'bool')
    return { flag: byName.get(name.slice(3)), name: name.slice(3), typed, inline, negated: true };
  return { flag: byName.get(name), name, typed, inline, negated: false };
}

/**
 * `err` with every flag it names in the spelling the user typed (`spelled`, from the parse):
 * `--actor.adam.lr: must be >= 0`, not a `--actor-learning-rate` the command line never had.
 */
export function quoteTyped(err: FlagError, spelled: ReadonlyMap<string, string>): FlagError {
  if (spelled.size === 0) return err;
  const swap = (text: string): string =>
    text.replace(/--[a-z][a-z0-9-]*/g, (f) => spelled.get(f) ?? f);
  return new FlagError(swap(err.flag), swap(err.message));
}

/**
 * The value of flag `f` at `argv[i]`: the `=` value, else the next argument(s) its kind takes (a
 * boolean alone is true; a `pair` takes two); `last` is the index of the last argument read.
 */
function readValue(
  f: FlagSpec,
  argv: readonly string[],
  i: number,
  inline: string | undefined,
  negated: boolean,
  shown: string,
): { value: unknown; last: number } {
  let value = inline;
  if (f.kind === 'bool') {
    if (value === undefined && !negated && /^(true|false)$/.test(argv[i + 1] ?? '')) {
      value = argv[++i];
    }
    const v = value === undefined ? true : parseBool(shown, value);
    return { value: negated ? !v : v, last: i };
  }
  const next = argv[i + 1];
  if (value === undefined && f.bare !== undefined && (next ?? '--').startsWith('--')) {
    value = f.bare;
  }
  if (value === undefined) {
    value = argv[++i];
    const numeric = f.kind === 'float' || f.kind === 'int' || f.kind === 'pair';
    if (value === undefined || (value.startsWith('--') && !numeric)) {
      throw new FlagError(shown, `${shown} needs a value`);
    }
  }
  if (
    f.kind === 'pair' &&
    inline === undefined &&
    argv[i + 1] !== undefined &&
    !argv[i + 1]!.startsWith('--')
  ) {
    value = `${value} ${argv[++i]}`;
  }
  return { value: parseValue(f, shown, value), last: i };
}

/** The `--help` text of a table: usage, then each flag with its default, variable and choices. */
function helpText<O extends object>(
  program: string,
  table: readonly FlagSpec<keyof O & string>[],
  defaults: O,
  opts: { positionals?: string; sectionTitles?: Readonly<Record<string, string>>; note?: string },
): string {
  const usage = `usage: ${program} [flags]${opts.positionals ? ` ${opts.positionals}` : ''}`;
  const lines = [usage + (opts.note ? `   (${opts.note})` : '')];
  let current: string | undefined;
  for (const f of table) {
    if (f.section !== undefined && f.section !== current) {
      current = f.section;
      lines.push('', `${opts.sectionTitles?.[current] ?? current}:`);
    }
    const d = (defaults as Record<string, unknown>)[f.key];
    const shownDefault =
      d === undefined || d === '' ? '' : ` (default ${Array.isArray(d) ? d.join(' ') : String(d)})`;
    const env = f.env ? ` [env ${f.env}]` : '';
    const choices =
      f.choices && !f.choices.every((c) => f.help.includes(c)) ? ` {${f.choices.join('|')}}` : '';
    const required = f.required ? ' (required)' : '';
    const openrlhf = f.openrlhf !== undefined ? ` [OpenRLHF: ${f.openrlhf}]` : '';
    const other = (f.aliases ?? []).filter((a) => a !== kebab(f.key));
    const aliases = other.length ? ` (also ${other.map((a) => `--${a}`).join(', ')})` : '';
    lines.push(
      `  --${kebab(f.key)}`.padEnd(36) +
        f.help +
        shownDefault +
        openrlhf +
        required +
        env +
        choices +
        aliases,
    );
  }
  return lines.join('\n');
}

function parseBool(flag: string, v: string): boolean {
  if (/^(1|true|yes)$/i.test(v)) return true;
  if (/^(0|false|no)$/i.test(v)) return false;
  throw new FlagError(flag, `${flag}: expected true or false, got '${v}'`);
}

/**
 * Every unknown flag of one command line in one error, as argparse reports them, each with a
 * near flag, or what rtjob does instead of a flag from OpenRLHF's scripts
 * (`--bf16: … RTJOB_TORCH_PRECISION=bf16 …`). One flag keeps the one-line form.
 */
function unknownFlags(
  program: string,
  flags: Unknown[],
  suggest: (name: string) => string,
): FlagError {
  const why = ({ name, values }: Unknown): string => {
    const foreign = foreignFlagNote(name, values);
    return elsewhere(name) || (foreign ? `: ${foreign}` : '') || suggest(name);
  };
  if (flags.length === 1)
    return new FlagError(flags[0]!.typed, `unknown flag ${flags[0]!.typed}${why(flags[0]!)}`);
  const lines = flags.map(
    (f) => `  ${f.typed}${why(f) || `: no such flag (${program} --help lists them)`}`,
  );
  return new FlagError(
    flags.map((f) => f.typed).join(' '),
    `${flags.length} unknown flags:\n${lines.join('\n')}`,
  );
}

/** Where the feature of a well-known flag from elsewhere is in rtjob (W&B, TensorBoard, MLflow). */
function elsewhere(name: string): string {
  if (/^(use-)?(wandb|tensorboard|mlflow)(-|$)/.test(name))
    return '; train_ppo and train_sft log to trackers (--use-tensorboard, --use-wandb, --use-mlflow), and every run to its head: the dashboard charts and compares runs, `rtjob metrics JOB --csv` exports them';
  return '';
}

function parseValue(f: FlagSpec, shown: string, raw: string): unknown {
  const v = raw.trim();
  switch (f.kind) {
    case 'string':
      if (f.choiceAliases?.[v] !== undefined) return f.choiceAliases[v];
      if (f.choices && !f.choices.includes(v)) {
        throw new FlagError(shown, `${shown}: '${v}' is not one of ${f.choices.join(', ')}`);
      }
      return v;
    case 'int': {
      if (!/^-?\d+$/.test(v))
        throw new FlagError(shown, `${shown}: expected an integer, got '${raw}'`);
      const n = Number(v);
      if (f.min !== undefined && n < f.min) {
        throw new FlagError(shown, `${shown}: must be an integer >= ${f.min}, got ${n}`);
      }
      return n;
    }
    case 'float': {
      const n = Number(v);
      if (v === '' || !Number.isFinite(n)) {
        throw new FlagError(shown, `${shown}: expected a number, got '${raw}'`);
      }
      if (f.min !== undefined && n < f.min)
        throw new FlagError(shown, `${shown}: must be >= ${f.min}, got ${n}`);
      return n;
    }
    case 'pair': {
      const parts = v.split(/[\s,]+/).map(Number);
      if (parts.length !== 2 || parts.some((x) => !Number.isFinite(x))) {
        throw new FlagError(shown, `${shown}: expected two numbers, got '${raw}'`);
      }
      return parts;
    }
    default:
      throw new FlagError(shown, `${shown}: unsupported`);
  }
}

/**
 * Runs `main` when `moduleUrl` is the script node was started with: `--help` prints `help`, a
 * {@link FlagError} prints its message and exits 2, any other error its name and message (its
 * stack with `RTJOB_DEBUG=1`, which `rtjob --verbose submit` sets) and exits 1.
 *
 * @example
 * runIfMain(import.meta.url, 'train_sft', main, () => sftFlags.help());
 */
export function runIfMain(
  moduleUrl: string,
  program: string,
  main: (argv: string[]) => Promise<unknown>,
  help: () => string,
): void {
  const script = process.argv[1];
  if (script === undefined || pathToFileURL(resolve(script)).href !== moduleUrl) return;
  const argv = process.argv.slice(2);
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(help() + '\n');
    process.exit(0);
  }
  main(argv).then(
    () => process.exit(0),
    (err: unknown) => {
      const flagError = err instanceof FlagError;
      // A Hub error is one line that says what to do, whole (a spec, a token, offline, disk).
      const oneLine = flagError || isHubError(err);
      // The runtime's frames (fromWire, transport …) say nothing to a user: stacks only on request.
      const debug = readEnv('RTJOB_DEBUG') === true;
      const text = !(err instanceof Error)
        ? String(err)
        : oneLine
          ? err.message
          : debug
            ? (err.stack ?? err.message)
            : `${err.name}: ${err.message}\n(rtjob --verbose submit …, or RTJOB_DEBUG=1, prints the stack)`;
      process.stderr.write(`${program}: ${text}\n`);
      process.exit(flagError ? 2 : 1);
    },
  );
}
