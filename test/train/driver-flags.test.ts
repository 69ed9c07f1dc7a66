import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { FlagError, flagParser } from '../../train/driver-flags.ts';
import { suggestFlag } from '../../train/flag-suggest.ts';
import { grep, sourceFiles } from '../conventions/source-files.ts';

const p = flagParser<{
  steps: number;
  learningRate: number;
  name?: string;
  fast: boolean;
  range: number[];
}>(
  'demo',
  [
    { key: 'steps', kind: 'int', help: 'steps', min: 1, env: 'ASYNC_NUM_TASKS' },
    { key: 'learningRate', kind: 'float', help: 'rate' },
    { key: 'name', kind: 'string', help: 'name', required: true, choices: ['a', 'b'] },
    { key: 'fast', kind: 'bool', help: 'go fast' },
    { key: 'range', kind: 'pair', help: 'lo hi' },
  ],
  { steps: 10, learningRate: 0.1, fast: false, range: [0, 1] },
  { positionals: '<dir>' },
);

const fails = (argv: string[], re: RegExp, env = {}): void => {
  try {
    p.parse(argv, env);
  } catch (e) {
    assert.ok(e instanceof FlagError, String(e));
    assert.is(e.code, 'BAD_FLAG');
    assert.match(e.message, re);
    return;
  }
  assert.unreachable(`expected ${argv.join(' ')} to fail`);
};

test('kebab, snake, = and two-number forms; positionals; defaults stay fresh', () => {
  const r = p.parse([
    'd1',
    '--steps',
    '3',
    '--learning_rate=0.5',
    '--name=b',
    '--fast',
    '--range',
    '-1',
    '2',
  ]);
  assert.equal(r.options, { steps: 3, learningRate: 0.5, name: 'b', fast: true, range: [-1, 2] });
  assert.equal(r.positionals, ['d1']);
  assert.equal([...r.given].sort(), ['fast', 'learningRate', 'name', 'range', 'steps']);
  const s = p.parse(['--name', 'a', '--no-fast']);
  assert.equal(s.options.range, [0, 1]);
  assert.is(s.options.fast, false);
});

test('the environment fills an absent flag; the flag wins', () => {
  assert.is(p.parse(['--name', 'a'], { ASYNC_NUM_TASKS: '7' }).options.steps, 7);
  assert.is(p.parse(['--name', 'a', '--steps', '2'], { ASYNC_NUM_TASKS: '7' }).options.steps, 2);
  fails(['--name', 'a'], /ASYNC_NUM_TASKS: expected an integer >= 1, got '0'/, {
    ASYNC_NUM_TASKS: '0',
  });
});

test('bad input fails with one line naming the flag', () => {
  fails(
    ['--name', 'a', '--learning-rate', 'abc'],
    /^--learning-rate: expected a number, got 'abc'$/,
  );
  fails(['--name', 'a', '--steps', '0'], /^--steps: must be an integer >= 1, got 0$/);
  fails(['--name', 'c'], /--name: 'c' is not one of a, b/);
  fails([], /^--name is required$/);
  fails(['--name', 'a', '--stepz', '1'], /unknown flag --stepz \(did you mean --steps\?\)/);
  fails(['--name', 'a', '--range', '1'], /--range: expected two numbers/);
});

test('--help lists every flag with its default, requirement and variable', () => {
  const h = p.help();
  assert.match(h, /^usage: demo \[flags\] <dir>/);
  assert.match(h, /--steps\s+steps \(default 10\) \[env ASYNC_NUM_TASKS\]/);
  assert.match(h, /--name\s+name \(required\)/);
});

test('every unknown flag is reported at once, each with a near flag or what rtjob does instead', () => {
  fails(
    ['--name', 'a', '--bf16', '--zero_stage', '3', '--stepz', '2', '--frobnicate', '--fast'],
    new RegExp(
      [
        '^4 unknown flags:',
        '  --bf16: .*RTJOB_TORCH_PRECISION=bf16.*--save-dtype bfloat16',
        '  --zero_stage: train_ppo takes it.*',
        '  --stepz \\(did you mean --steps\\?\\)',
        '  --frobnicate: no such flag \\(demo --help lists them\\)$',
      ].join('\n'),
    ),
  );
  // The value of an unknown flag is skipped, not taken for a positional or the next flag.
  fails(['--name', 'a', '--ring_attn_size', '2', '--lora_rank', '16'], /^2 unknown flags:\n/);
  fails(['--name', 'a', '--flash_attn'], /^unknown flag --flash_attn: not applicable: attention/);
});

test('unknown flags suggest by meaning, and a short name only a near spelling (H12)', () => {
  fails(['--name', 'a', '--lr', '0.1'], /^unknown flag --lr \(did you mean --learning-rate\?\)$/);
  fails(
    ['--name', 'a', '--rate', '0.1'],
    /^unknown flag --rate \(did you mean --learning-rate\?\)$/,
  );
  fails(['--name', 'a', '--num-steps', '3'], /\(did you mean --steps\?\)/);
  // Two letters away from --l2 in spelling only: no suggestion, as argparse would make none.
  assert.is(suggestFlag('zz', ['l2', 'lr-warmup-ratio']), undefined);
  assert.is(suggestFlag('weight-decay', ['l2', 'lr-warmup-ratio']), 'l2');
  assert.is(suggestFlag('kl-coef', ['init-kl-coef', 'kl-target']), 'init-kl-coef');
  assert.is(suggestFlag('input-template', ['input-key', 'label-key']), undefined);
});

test('--help lists the other names of each flag', () => {
  const q = flagParser<{ agentFunc?: string }>(
    'demo',
    [
      {
        key: 'agentFunc',
        kind: 'string',
        help: 'agent',
        aliases: ['agent-func', 'agent-func-path'],
      },
    ],
    {},
  );
  assert.match(q.help(), /--agent-func\s+agent \(also --agent-func-path\)$/m);
  assert.is(q.parse(['--agent_func_path', 'a.ts']).options.agentFunc, 'a.ts');
});

test('a driver exits 2 with one line on a bad flag (train_sft as a real process)', () => {
  const script = fileURLToPath(new URL('../../train/sft.ts', import.meta.url));
  const r = spawnSync(
    process.execPath,
    ['--import', 'tsx', script, '--save-path', '/tmp/x', '--lr', 'abc'],
    {
      encoding: 'utf8',
    },
  );
  assert.is(r.status, 2);
  assert.is(r.stderr.trim(), "train_sft: --lr: expected a number, got 'abc'");
});

test('drivers parse with driver-flags, not a second parser', () => {
  const files = sourceFiles({ withFixtures: false }).filter((f) =>
    f.path.startsWith('algorithms/'),
  );
  assert.equal(grep(files, /from 'commander'/), []);
});

test.run();
