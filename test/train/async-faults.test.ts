import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trainPpo } from '../../train/ppo/main.ts';
import { PromptSampler } from '../../train/ppo/data.ts';
import { runWithTrainerKilled } from '../fixtures/agents/kill-trainer.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

// A real cluster: the trainer is an actor in its own worker process, killed as a crash would be,
// while the async producer has batches generated ahead of it that were never trained on.
process.env.RTJOB_QUIET_BACKEND = '1';
delete process.env.RTJOB_ADDRESS;
const root = mkdtempSync(join(tmpdir(), 'rtjob-async-faults-'));
process.env.HOME = root;
let model = '';
const records = Array.from({ length: 12 }, (_, i) => ({
  prompt: `What is ${i}+1?`,
  solution: `#### ${i + 1}`,
}));

/** The prompts the sampler hands out over `steps` steps: what must be trained, in order. */
function expectedOrder(steps: number, batch: number, seed = 42): number[] {
  const s = new PromptSampler(records, { input: 'prompt', label: 'solution' }, seed);
  return Array.from({ length: steps }, () => s.next(batch).map((x) => x.index)).flat();
}

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

test('async: a killed trainer fails the job with the cause; --load-checkpoint resumes with no prompt lost or repeated', async () => {
  const data = join(root, 'plain.jsonl');
  writeFileSync(data, records.map((r) => JSON.stringify(r)).join('\n'));
  const ckpt = join(root, 'ckpt');
  const flags = tinyRunArgs(model, join(root, 'out'), {
    'async-train': true,
    'async-queue-size': 2,
    'prompt-data': data,
    'save-steps': 1,
    'ckpt-path': ckpt,
    'max-steps': 5,
  });
  const saved = await runWithTrainerKilled(flags, ckpt);

  const lines: string[] = [];
  const rows: Record<string, number>[] = [];
  const resumed = await trainPpo(
    [...flags, '--load-checkpoint'],
    {},
    {
      log: { line: (t) => void lines.push(t), metric: (_s, v) => void rows.push(v) },
    },
  );
  assert.ok(
    lines.some((l) =>
      l.includes(`resumed from ${join(ckpt, `global_step_${saved}`)} at step ${saved}`),
    ),
    lines.join('\n'),
  );
  assert.is(resumed.steps, 5);
  // Batches generated ahead of the trainer but not trained before the kill are generated again.
  assert.equal(
    resumed.trainedPrompts,
    expectedOrder(5, 4),
    'the data position resumed exactly, across the epoch boundary',
  );
  const stale = rows.filter((r) => r.staleness_max !== undefined).map((r) => r.staleness_max!);
  assert.is(stale.length, 5 - saved);
  assert.ok(
    stale.every((x) => x <= 2),
    `staleness ${stale.join(',')} within ASYNC_QUEUE_SIZE`,
  );
});

test.run();
