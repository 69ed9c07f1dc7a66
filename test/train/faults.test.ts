import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trainPpo } from '../../train/ppo/main.ts';
import { PromptSampler } from '../../train/ppo/data.ts';
import { runWithTrainerKilled } from '../fixtures/agents/kill-trainer.ts';
import { tinyRunArgs, writeTinyModel } from '../fixtures/agents/tiny-model.ts';

// Real clusters: every role is an actor in its own worker process, killed as a crash would.
process.env.RTJOB_QUIET_BACKEND = '1';
delete process.env.RTJOB_ADDRESS;
const root = mkdtempSync(join(tmpdir(), 'rtjob-faults-'));
process.env.HOME = root;
let model = '';
const fixture = (name: string): string =>
  fileURLToPath(new URL(`../fixtures/agents/${name}`, import.meta.url));
const records = Array.from({ length: 12 }, (_, i) => ({
  prompt: `What is ${i}+1?`,
  solution: `#### ${i + 1}`,
}));

function dataset(name: string, extra: (i: number) => Record<string, unknown> = () => ({})): string {
  const file = join(root, name);
  writeFileSync(file, records.map((r, i) => JSON.stringify({ ...r, ...extra(i) })).join('\n'));
  return file;
}

/** The prompts the sampler hands out over `steps` steps: what must be trained, in order. */
function expectedOrder(steps: number, batch: number, seed = 42): number[] {
  const s = new PromptSampler(records, { input: 'prompt', label: 'solution' }, seed);
  return Array.from({ length: steps }, () => s.next(batch).map((x) => x.index)).flat();
}

const base = (extra: string[]): string[] => [...tinyRunArgs(model, join(root, 'out')), ...extra];

test.before(async () => {
  model = await writeTinyModel(root);
});
test.after(() => rmSync(root, { recursive: true, force: true }));

test('a rollout worker killed mid-run restarts, its in-flight groups re-run, every prompt trained once', async () => {
  const marker = join(root, 'crashed');
  const data = dataset('crash.jsonl', (i) => (i === 5 ? { crashMarker: marker } : {}));
  const lines: string[] = [];
  const rows: Record<string, number>[] = [];
  const log = {
    line: (t: string) => void lines.push(t),
    metric: (_s: number, v: Record<string, number>) => void rows.push(v),
  };
  const s = await trainPpo(
    base([
      '--async-train',
      '--async-queue-size',
      '2',
      '--rollout-num-engines',
      '2',
      '--prompt-data',
      data,
      '--max-steps',
      '-1',
      '--agent-func',
      fixture('crash-once-step.ts'),
    ]),
    {},
    { log },
  );
  assert.ok(existsSync(marker), 'the crash happened');
  assert.is(s.steps, 3);
  assert.is(s.rolloutRestarts, 1);
  assert.ok(
    lines.some((l) => /rollout \d: the rollout died: its process ended \(signal SIGKILL\)/.test(l)),
    lines.join('\n'),
  );
  assert.ok(lines.some((l) => /rollout \d is back/.test(l)));
  assert.equal(
    [...s.trainedPrompts].sort((a, b) => a - b),
    records.map((_, i) => i),
    'each prompt of the epoch exactly once',
  );
  assert.equal(s.trainedPrompts, expectedOrder(3, 4));
  assert.is(s.episodesFailed, 0);
  assert.is(rows.filter((r) => r.reward_mean !== undefined).at(-1)!.rollout_restarts, 1);
});

test('a rollout that dies while the roles first start is restarted and the run goes on', async () => {
  const marker = join(root, 'crashed-on-load');
  process.env.CRASH_ON_LOAD_MARKER = marker;
  const lines: string[] = [];
  try {
    const s = await trainPpo(
      base([
        '--rollout-num-engines',
        '1',
        '--prompt-data',
        dataset('load-crash.jsonl'),
        '--max-steps',
        '1',
        '--agent-func',
        fixture('crash-on-load-step.ts'),
      ]),
      {},
      { log: { line: (t) => void lines.push(t), metric: () => undefined } },
    );
    assert.ok(existsSync(marker), 'the rollout died while loading its agent');
    assert.is(s.steps, 1, lines.join('\n'));
    assert.is(s.episodesFailed, 0);
  } finally {
    delete process.env.CRASH_ON_LOAD_MARKER;
  }
});

test('a killed trainer fails the job with the cause; --load-checkpoint resumes with no prompt lost or repeated', async () => {
  const data = dataset('plain.jsonl');
  const ckpt = join(root, 'ckpt');
  const flags = base([
    '--prompt-data',
    data,
    '--save-steps',
    '1',
    '--ckpt-path',
    ckpt,
    '--max-steps',
    '5',
  ]);
  const saved = await runWithTrainerKilled(flags, ckpt);

  const lines: string[] = [];
  const resumed = await trainPpo(
    [...flags, '--load-checkpoint'],
    {},
    { log: { line: (t) => void lines.push(t), metric: () => undefined } },
  );
  assert.ok(
    lines.some((l) =>
      l.includes(`resumed from ${join(ckpt, `global_step_${saved}`)} at step ${saved}`),
    ),
    lines.join('\n'),
  );
  assert.is(resumed.steps, 5);
  assert.equal(
    resumed.trainedPrompts,
    expectedOrder(5, 4),
    'the data position resumed exactly, across the epoch boundary',
  );
});

test.run();
