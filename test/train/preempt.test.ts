// Save on notice, with real driver processes and real signals: a SIGTERM or SIGUSR1 mid-run
// writes a checkpoint of the last finished step within --preempt-save-s though no --save-steps
// checkpoint is due, the episodes in flight are dropped (`stopped`), and the run resumed by
// RTJOB_AUTO_RESUME continues exactly: the same prompts in the same order, each trained
// n_samples times, the ledger balanced across both runs.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { PromptSampler } from '../../train/ppo/data.ts';
import {
  checkpointState,
  startDriver,
  until,
  type Driver,
} from '../fixtures/agents/driver-process.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

const root = mkdtempSync(join(tmpdir(), 'rtjob-preempt-'));
const agent = fileURLToPath(new URL('../fixtures/agents/slow-once-step.ts', import.meta.url));
const steps = 6;
const batch = 4;
const nSamples = 2;
const records = Array.from({ length: 16 }, (_, i) => ({
  prompt: `What is ${i}+1?`,
  solution: `#### ${i + 1}`,
}));
let model = '';

/** The prompts of each step, in the order the sampler hands them out. */
const order = (() => {
  const s = new PromptSampler(records, { input: 'prompt', label: 'solution' }, 42);
  return Array.from({ length: steps }, () => s.next(batch).map((x) => x.index));
})();

function runArgs(
  dir: string,
  data: string,
  extra: Record<string, string | number | boolean> = {},
): string[] {
  return tinyRunArgs(model, join(dir, 'out'), {
    'in-process': true,
    'rollout-batch-size': batch,
    'n-samples-per-prompt': nSamples,
    'prompt-data': data,
    'max-steps': steps,
    'agent-func': agent,
    'ckpt-path': join(dir, 'ckpt'),
    // Never due in this run but at its end: a stop's checkpoint is the save on notice alone.
    'save-steps': 100,
    seed: 42,
    ...extra,
  });
}

/**
 * One preemption: the run is signalled at `moment`, must save within the deadline, and the
 * resume must end as an uninterrupted run would.
 */
async function preemptAndResume(
  name: string,
  signal: NodeJS.Signals,
  moment: (d: Driver, marker: string) => Promise<void>,
  slowStep: number,
  extra: Record<string, string | number | boolean> = {},
): Promise<{ savedS: number; step: number }> {
  const dir = join(root, name);
  const marker = join(dir, 'slow');
  const slow = order[slowStep - 1]![0]!;
  const data = join(root, `${name}.jsonl`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    data,
    records.map((r, i) => JSON.stringify(i === slow ? { ...r, slowMarker: marker } : r)).join('\n'),
  );
  const args = runArgs(dir, data, extra);
  const first = startDriver(args, { HOME: root });
  await moment(first, marker);
  first.child.kill(signal);
  const end = await first.exited;
  const out = first.out();
  assert.is(end.code, signal === 'SIGUSR1' ? 138 : 143, out);
  const saved =
    /stop {2}checkpoint of step (\d+) in .* saved ([\d.]+)s after the notice \(deadline 25s\)/.exec(
      out,
    );
  assert.ok(saved, `a checkpoint on notice:\n${out}`);
  const step = Number(saved[1]);
  const savedS = Number(saved[2]);
  assert.ok(savedS < 25, `saved within the deadline (${savedS}s)`);
  console.log(
    `  ${name}: ${signal} -> checkpoint of step ${step} saved ${savedS}s after the notice`,
  );
  const stopped = checkpointState(join(dir, 'ckpt'));
  assert.is(stopped.step, step);
  assert.equal(
    stopped.trainedPrompts,
    order.slice(0, step).flat(),
    'the checkpoint holds the finished steps',
  );
  assert.match(
    out,
    /episodes: sampled \d+ = trained \d+ \+ dropped \d+ .*\+ in flight 0; .*conservation ok/,
  );
  // The resume: the same command, RTJOB_AUTO_RESUME as `rtjob submit --auto-resume` sets it.
  const second = startDriver(args, { HOME: root, RTJOB_AUTO_RESUME: '1' });
  const done = await second.exited;
  const out2 = second.out();
  assert.is(done.code, 0, out2);
  assert.match(out2, new RegExp(`ckpt {2}resumed from .*global_step_${step} at step ${step}`));
  const last = checkpointState(join(dir, 'ckpt'));
  assert.is(last.step, steps);
  assert.equal(last.trainedPrompts, order.flat(), 'every prompt trained once, in order');
  const l = last.ledger;
  const dropped = Object.values(l.dropped).reduce((a, n) => a + (n ?? 0), 0);
  assert.is(l.sampled, l.trained + dropped, 'the books balance across both runs');
  assert.is(l.trained, steps * batch * nSamples);
  assert.ok(
    Object.values(l.trainedGroups).every((n) => n === nSamples),
    'each prompt n_samples times',
  );
  assert.match(out2, /prompts: each trained exactly 2 times; conservation ok/);
  return { savedS, step };
}

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

test('SIGTERM while a step generates: a checkpoint of the step before, its episodes dropped, the resume exact', async () => {
  const r = await preemptAndResume(
    'generating',
    'SIGTERM',
    (d, marker) => until(d, 'the long episode', () => existsSync(marker)),
    3,
  );
  assert.is(r.step, 2, 'the last finished step');
});

test('SIGUSR1 after a step: a checkpoint of that step or the next, the resume exact', async () => {
  const r = await preemptAndResume(
    'after-step',
    'SIGUSR1',
    (d) => until(d, 'step 2', () => /step 2\/6/.test(d.out())),
    5,
  );
  assert.ok(r.step >= 2 && r.step < steps, `step ${r.step}`);
});

test('async: SIGTERM after a step, a batch generated ahead: saved, the resume exact', async () => {
  const r = await preemptAndResume(
    'async',
    'SIGTERM',
    (d) => until(d, 'step 2', () => /step 2\/6/.test(d.out())),
    5,
    { 'async-train': true, 'async-queue-size': 1 },
  );
  assert.ok(r.step >= 2 && r.step < steps, `step ${r.step}`);
});

test.run();
