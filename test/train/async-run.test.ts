import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../algorithms/train-ppo.ts';
import { writeTinyModel } from '../fixtures/agents/tiny-model.ts';

process.env.RTJOB_QUIET_BACKEND = '1';
const root = mkdtempSync(join(tmpdir(), 'rtjob-async-'));
let model = '';
const fixture = (name: string): string => fileURLToPath(new URL(`../fixtures/agents/${name}`, import.meta.url));
const rows: Record<string, number>[] = [];
const log = { line: () => undefined, metric: (_s: number, v: Record<string, number>) => void rows.push(v) };
const tiny = (extra: string[]): string[] => [
  '--in-process', '--async-train', '--pretrain', model, '--rollout-batch-size', '4', '--n-samples-per-prompt', '2',
  '--train-batch-size', '8', '--micro-train-batch-size', '8', '--generate-max-len', '6', '--max-steps', '4',
  '--eval-dataset', '', '--save-path', join(root, 'out'), '--agent-func', fixture('multi-turn-step.ts'), ...extra,
];

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

for (const q of [1, 2]) {
  test(`ASYNC_QUEUE_SIZE=${q}: staleness stays within ${q} and every prompt is trained once`, async () => {
    rows.length = 0;
    const s = await trainPpo(tiny([]), { ASYNC_QUEUE_SIZE: String(q), ASYNC_NUM_TASKS: '4' }, { log });
    assert.is(s.steps, 4);
    assert.is(s.trainedPrompts.length, 16);
    assert.is(new Set(s.trainedPrompts).size, 16, 'no prompt repeated');
    const steps = rows.filter((r) => r.staleness_max !== undefined);
    assert.is(steps.length, 4);
    for (const r of steps) {
      assert.ok(r.staleness_max! <= q, `staleness ${r.staleness_max} > ${q}`);
      assert.ok(r.buffer_fill! >= 1 && r.buffer_fill! <= q);
    }
    assert.ok(steps.some((r) => r.staleness_max! >= 1), 'async runs ahead: some batch is off-policy');
  });
}

test('--partial-rollout and --use-decoupled-loss train with staleness logged', async () => {
  rows.length = 0;
  const s = await trainPpo(tiny(['--partial-rollout', '--use-decoupled-loss', '--async-queue-size', '2']), {}, { log });
  assert.is(s.steps, 4);
  const steps = rows.filter((r) => r.staleness_max !== undefined);
  assert.ok(steps.every((r) => r.staleness_max! <= 3 && Number.isFinite(r.policy_loss!)));
});

test('--episode-timeout is accepted by an async run that completes', async () => {
  const s = await trainPpo(
    tiny(['--agent-func', fixture('hang-step.ts'), '--episode-timeout-ms', '300', '--agent-error-budget', '0.5', '--max-steps', '2']),
    {},
    { log },
  );
  assert.is(s.steps, 2);
});

test.run();
