import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, existsSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../train/ppo/main.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-sync-'));
let model = '';
const fixture = (name: string): string =>
  fileURLToPath(new URL(`../fixtures/agents/${name}`, import.meta.url));
const lines: string[] = [];
const rows: { step: number; values: Record<string, number> }[] = [];
const log = {
  line: (t: string) => void lines.push(t),
  metric: (step: number, values: Record<string, number>) => void rows.push({ step, values }),
};

const tiny = (extra: string[]): string[] => [
  ...tinyRunArgs(model, join(root, 'out'), {
    'in-process': true,
    'micro-train-batch-size': 4,
    'generate-max-len': 6,
    'max-steps': 2,
    'eval-dataset': false,
    'eval-prompts': 4,
    'ckpt-path': join(root, 'ckpt'),
  }),
  ...extra,
];

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

test('a step-function agent trains end to end with group_norm and saves an HF policy', async () => {
  rows.length = 0;
  const s = await trainPpo(
    tiny(['--agent-func', fixture('multi-turn-step.ts'), '--advantage-estimator', 'group_norm']),
    {},
    { log },
  );
  assert.is(s.steps, 2);
  assert.is(s.trainedPrompts.length, 8);
  assert.ok(existsSync(join(root, 'out', 'model.safetensors')));
  assert.ok(existsSync(join(root, 'out', 'tokenizer.json')));
  const steps = rows.filter((r) => r.values.reward_mean !== undefined);
  assert.is(steps.length, 2);
  assert.equal(
    steps.map((r) => r.values.version),
    [1, 2],
  );
  assert.ok(
    steps.every((r) => r.values.staleness_max === 0),
    'sync is on-policy',
  );
});

for (const est of ['gae', 'reinforce', 'rloo', 'dr_grpo']) {
  test(`advantage estimator ${est} runs a step (workflow agent)`, async () => {
    rows.length = 0;
    const extra = [
      '--agent-func',
      fixture('group-workflow.ts'),
      '--advantage-estimator',
      est,
      '--max-steps',
      '1',
      '--eval-dataset',
      '',
    ];
    if (est === 'reinforce') extra.push('--init-kl-coef', '0.01');
    const s = await trainPpo(tiny(extra), {}, { log });
    assert.is(s.steps, 1);
    const v = rows.find((r) => r.values.reward_mean !== undefined)!.values;
    assert.ok(Number.isFinite(v.policy_loss!));
    if (est === 'gae') assert.ok(Number.isFinite(v.value_loss!));
  });
}

test('checkpoint and resume continue the data position exactly', async () => {
  const ck = join(root, 'ckpt-resume');
  const base = ['--save-steps', '1', '--ckpt-path', ck, '--eval-dataset', ''];
  const full = await trainPpo(
    tiny([...base, '--max-steps', '3', '--ckpt-path', join(root, 'ckpt-full')]),
    {},
    { log },
  );
  const firstFrom = rows.length;
  const first = await trainPpo(tiny([...base, '--max-steps', '1']), {}, { log });
  const resumedFrom = rows.length;
  assert.ok(existsSync(join(ck, 'global_step_1', 'optimizer.safetensors')));
  assert.is(readFileSync(join(ck, 'latest'), 'utf8').trim(), 'global_step_1');
  const resumed = await trainPpo(
    tiny([...base, '--max-steps', '3', '--load-checkpoint']),
    {},
    { log },
  );
  assert.is(resumed.steps, 3);
  assert.equal(first.trainedPrompts, full.trainedPrompts.slice(0, first.trainedPrompts.length));
  assert.equal(resumed.trainedPrompts, full.trainedPrompts, 'no prompt lost or repeated');
  // Generated tokens so far carry over the resume.
  const value = (from: number, to: number, step: number, key: string) =>
    rows.slice(from, to).find((r) => r.step === step && r.values[key] !== undefined)?.values[key];
  const before = value(firstFrom, resumedFrom, 1, 'tokens_total');
  assert.ok(before !== undefined && before > 0, `step 1 logged tokens_total ${before}`);
  assert.is(
    value(resumedFrom, rows.length, 2, 'tokens_total'),
    before + value(resumedFrom, rows.length, 2, 'tokens')!,
  );
});

test('an agent past its error budget fails the run with the cause', async () => {
  const err = await trainPpo(
    tiny([
      '--agent-func',
      fixture('flaky-step.ts'),
      '--agent-error-budget',
      '0',
      '--eval-dataset',
      '',
    ]),
    {},
    { log },
  ).then(
    () => null,
    (e: Error) => e,
  );
  assert.ok(err);
  const m =
    /flaky-step\.ts: (\d+) of 8 episodes failed \((\d+) groups? dropped with them\), past the error budget; last: .*environment crashed/.exec(
      err!.message,
    );
  assert.ok(m, err!.message);
  // Every episode of an even prompt throws: each failed group holds 2 failed episodes.
  assert.is(Number(m[1]), 2 * Number(m[2]));
});

test('failure counts name episodes and groups: one throwing episode in a group is one failed episode', async () => {
  const err = await trainPpo(
    tiny([
      '--agent-func',
      fixture('one-in-four-step.ts'),
      '--agent-error-budget',
      '0',
      '--eval-dataset',
      '',
    ]),
    {},
    { log },
  ).then(
    () => null,
    (e: Error) => e,
  );
  // 2 of the 8 episodes throw; their groups (1 or 2) are dropped, but only 2 episodes failed.
  assert.match(
    err!.message,
    /one-in-four-step\.ts: 2 of 8 episodes failed \((1 group|2 groups) dropped with them\)/,
  );
});

test('a bad flag fails before anything starts, naming the flag', async () => {
  const err = await trainPpo(['--agent-func', join(dirname(root), 'nope.ts')], {}, { log }).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(err!.message, /--agent-func: no such file/);
});

test.run();
