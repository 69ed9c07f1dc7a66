import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../train/ppo/main.ts';
import { inProcessRoles } from '../../train/ppo/roles.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-async-'));
let model = '';
const fixture = (name: string): string =>
  fileURLToPath(new URL(`../fixtures/agents/${name}`, import.meta.url));
const rows: Record<string, number>[] = [];
const log = {
  line: () => undefined,
  metric: (_s: number, v: Record<string, number>) => void rows.push(v),
};
const tiny = (extra: string[]): string[] => [
  ...tinyRunArgs(model, join(root, 'out'), {
    'in-process': true,
    'async-train': true,
    'generate-max-len': 6,
    'max-steps': 4,
    'agent-func': fixture('multi-turn-step.ts'),
  }),
  ...extra,
];

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

for (const q of [1, 2]) {
  test(`ASYNC_QUEUE_SIZE=${q}: staleness stays within ${q} and every prompt is trained once`, async () => {
    rows.length = 0;
    const s = await trainPpo(
      tiny([]),
      { ASYNC_QUEUE_SIZE: String(q), ASYNC_NUM_TASKS: '4' },
      { log },
    );
    assert.is(s.steps, 4);
    assert.is(s.trainedPrompts.length, 16);
    assert.is(new Set(s.trainedPrompts).size, 16, 'no prompt repeated');
    const steps = rows.filter((r) => r.staleness_max !== undefined);
    assert.is(steps.length, 4);
    for (const r of steps) {
      assert.ok(r.staleness_max! <= q, `staleness ${r.staleness_max} > ${q}`);
      assert.ok(r.buffer_fill! >= 1 && r.buffer_fill! <= q);
    }
    assert.ok(
      steps.some((r) => r.staleness_max! >= 1),
      'async runs ahead: some batch is off-policy',
    );
  });
}

test('--max-head-offpolicyness caps staleness below what the queue allows', async () => {
  for (const eta of [0, 1]) {
    rows.length = 0;
    const s = await trainPpo(
      tiny(['--max-head-offpolicyness', String(eta)]),
      { ASYNC_QUEUE_SIZE: '3' },
      { log },
    );
    assert.is(s.steps, 4);
    const stale = rows.filter((r) => r.staleness_max !== undefined).map((r) => r.staleness_max!);
    assert.is(stale.length, 4);
    assert.ok(
      stale.every((x) => x <= eta),
      `eta ${eta}: staleness ${stale.join(',')}`,
    );
    if (eta === 1)
      assert.ok(
        stale.some((x) => x === 1),
        'still runs ahead by one',
      );
  }
});

test('--partial-rollout and --use-decoupled-loss train with staleness logged', async () => {
  rows.length = 0;
  const s = await trainPpo(
    tiny(['--partial-rollout', '--use-decoupled-loss', '--async-queue-size', '2']),
    {},
    { log },
  );
  assert.is(s.steps, 4);
  const steps = rows.filter((r) => r.staleness_max !== undefined);
  assert.ok(steps.every((r) => r.staleness_max! <= 3 && Number.isFinite(r.policy_loss!)));
});

test('evaluation runs beside training: accuracy is logged for the weights of its step and the run goes on', async () => {
  rows.length = 0;
  const lines: string[] = [];
  const s = await trainPpo(
    tiny([
      '--eval-dataset',
      'arith:test',
      '--eval-prompts',
      '4',
      '--eval-steps',
      '2',
      '--async-queue-size',
      '2',
    ]),
    {},
    { log: { line: (t: string) => void lines.push(t), metric: log.metric } },
  );
  assert.is(s.steps, 4);
  assert.ok(s.evalBefore !== undefined && s.evalAfter !== undefined);
  const evals = rows.filter((r) => r.eval_accuracy !== undefined);
  // Before, at step 2 (beside training), and after the last step.
  assert.is(evals.length, 3, JSON.stringify(evals));
  assert.is(
    evals.filter((r) => r.eval_s !== undefined).length,
    1,
    'one evaluation ran beside training',
  );
  assert.ok(
    lines.some((l) => /^eval {2}step 2: .* beside training/.test(l)),
    lines.join('\n'),
  );
  assert.is(rows.filter((r) => r.staleness_max !== undefined).length, 4);
  for (const r of rows.filter((x) => x.staleness_max !== undefined))
    assert.ok(r.publish_wait_s! >= 0 && r.episodes_per_s! > 0 && r.step_s! > 0, JSON.stringify(r));
});

test('weights publish beside training, in order, and every engine holds the last version when the run ends', async () => {
  rows.length = 0;
  let ended: { engines: number[]; trainer: number } | undefined;
  const s = await trainPpo(
    tiny(['--rollout-num-engines', '2', '--async-queue-size', '2']),
    {},
    {
      log,
      roles: async (config) => {
        const r = await inProcessRoles(config);
        return {
          ...r,
          close: async () => {
            ended = {
              engines: await Promise.all(r.rollouts.map((x) => x.getVersion())),
              trainer: await r.trainer.getVersion(),
            };
            await r.close();
          },
        };
      },
    },
  );
  assert.is(s.steps, 4);
  assert.equal(ended, { engines: [4, 4], trainer: 4 });
  const steps = rows.filter((r) => r.staleness_max !== undefined);
  assert.equal(
    steps.map((r) => r.version),
    [1, 2, 3, 4],
    'the trainer version of each step',
  );
  assert.ok(steps.every((r) => r.staleness_max! <= 2));
});

test('--episode-timeout fails hung episodes, frees their slots, and the run goes on', async () => {
  // Every fourth prompt hangs forever; with 2 tasks per engine, unfreed slots would stall the run.
  const data = join(root, 'hang.jsonl');
  const recs = Array.from({ length: 8 }, (_, i) => ({
    prompt: `What is ${i}+1?`,
    solution: `#### ${i + 1}`,
    ...(i % 4 === 1 ? { hang: true } : {}),
  }));
  writeFileSync(data, recs.map((r) => JSON.stringify(r)).join('\n'));
  rows.length = 0;
  const t0 = performance.now();
  const s = await trainPpo(
    tiny([
      '--agent-func',
      fixture('hang-step.ts'),
      '--prompt-data',
      data,
      '--episode-timeout-ms',
      '300',
      '--agent-error-budget',
      '0.5',
      '--max-steps',
      '2',
    ]),
    { ASYNC_NUM_TASKS: '2' },
    { log },
  );
  assert.is(s.steps, 2);
  assert.is(s.episodesFailed, 4, 'both episodes of each of the 2 hanging prompts counted failed');
  assert.equal([...s.trainedPrompts].sort(), [0, 2, 3, 4, 6, 7], 'hung groups are not trained on');
  assert.ok(performance.now() - t0 < 30_000);
  assert.is(rows.filter((r) => r.episodes_failed !== undefined).at(-1)!.episodes_failed, 4);
});

test.run();
